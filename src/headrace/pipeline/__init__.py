"""When: the loader, its prefetch queue and its state."""

from headrace.pipeline._loader import Batch, Loader, LoaderStatus, Source

__all__ = [
    "Batch",
    "Loader",
    "LoaderStatus",
    "Source",
]
