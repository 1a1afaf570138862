"""The loader's parts that other modules name: the :class:`Source` protocol, where its
time went (:class:`LoaderStats`) and its lifecycle (:class:`LoaderStatus`)."""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from headrace.pipeline._layout import Batch

__all__ = ["LoaderStats", "LoaderStatus", "Source"]


class Source(Protocol):
    """Anything that can read samples by global sample number."""

    def fingerprint(self) -> dict[str, Any]:
        """JSON-able description of the data and sampling config (paths, sizes, dtypes)."""
        ...

    def read(self, seed: int, samples: NDArray[np.int64]) -> Batch:
        """Arrays whose first axis follows ``samples`` (a pure function of its inputs)."""
        ...


@dataclass(slots=True)
class LoaderStats:
    """Where a loader's time went, summed over its iterations (seconds, wall clock).

    ``plan_s``: sample numbers of each chunk (and of the next, to read ahead);
    ``source_s``: inside ``source.read`` (reading, decoding, gathering and
    collating: whatever the source does; its own stats may split it further),
    waits for the source's lock included; ``prefetch_s``: inside
    ``source.prefetch`` (starting the next chunk's reads); ``queue_wait_s``:
    the consumer waiting for the read-ahead thread (0 with ``prefetch=0``,
    where the consumer's own thread reads); ``transform_s``: inside the
    loader's ``transform``. Counted per chunk, not per batch: a few
    ``perf_counter`` calls per 32 steps.
    """

    chunks: int = 0
    steps: int = 0
    plan_s: float = 0.0
    source_s: float = 0.0
    prefetch_s: float = 0.0
    queue_wait_s: float = 0.0
    transform_s: float = 0.0

    def to_dict(self) -> dict[str, float | int]:
        return asdict(self)


class LoaderStatus(enum.Enum):
    IDLE = "idle"
    RUNNING = "running"
    CLOSED = "closed"
