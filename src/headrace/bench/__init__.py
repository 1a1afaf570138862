"""Benchmarks: workloads, datasets, runners and reports (``headrace bench``, ``headrace gen``)."""

from headrace.bench._au import max_accelerators
from headrace.bench._dlio import dlio_workload
from headrace.bench._kind import KINDS, Kind, Stream, VariantSpec, make_kind, variant
from headrace.bench._runner import RunOptions, run_workload
from headrace.bench._workload import TrainConfig, Workload, builtin_workloads, load_workload

__all__ = [
    "KINDS",
    "Kind",
    "RunOptions",
    "Stream",
    "TrainConfig",
    "VariantSpec",
    "Workload",
    "builtin_workloads",
    "dlio_workload",
    "load_workload",
    "make_kind",
    "max_accelerators",
    "run_workload",
    "variant",
]
