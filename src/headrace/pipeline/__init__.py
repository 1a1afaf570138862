"""When: the loader, its prefetch queue and its state."""

from headrace.pipeline._loader import Batch, Loader, LoaderStatus, Source
from headrace.pipeline._mixture import Mixture

__all__ = [
    "Batch",
    "Loader",
    "LoaderStatus",
    "Mixture",
    "Source",
]
