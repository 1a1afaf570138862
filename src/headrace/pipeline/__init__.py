"""When: the loader, its prefetch queue and its state."""

from headrace.pipeline._check import CheckReport, Problem, check
from headrace.pipeline._filtered import Filtered
from headrace.pipeline._layout import Batch
from headrace.pipeline._loader import DEFAULT_CHUNK_STEPS, Loader
from headrace.pipeline._loader_types import LoaderStats, LoaderStatus, Source
from headrace.pipeline._mapped import Mapped
from headrace.pipeline._mixture import Mixture
from headrace.pipeline._transform import Samples, Transform

__all__ = [
    "Batch",
    "CheckReport",
    "DEFAULT_CHUNK_STEPS",
    "Filtered",
    "Loader",
    "LoaderStats",
    "LoaderStatus",
    "Mapped",
    "Mixture",
    "Problem",
    "Samples",
    "Source",
    "Transform",
    "check",
]
