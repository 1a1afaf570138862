"""How bytes arrive: local files, range reads, coalescing, the adaptive policy, the I/O pools.

The engine is :class:`RangeReader`: give it a path and ``(offset, length)``
ranges (or fixed-width row indices) and it returns the bytes in caller order,
whatever order it read them in. Strategies: ``"mmap"``, ``"pread"``,
``"odirect"``, ``"odirect-serial"`` and ``"adaptive"`` (see
:class:`ReaderConfig`); all return identical bytes.
"""

from headrace.io._adaptive import AdaptivePolicy
from headrace.io._buffers import PAGE, page_aligned_empty
from headrace.io._file import LocalFile, open_error
from headrace.io._pool import (
    DEFAULT_DEEP_IO_THREADS,
    DEFAULT_IO_THREADS,
    deep_io_pool,
    deep_io_threads,
    io_pool,
    io_threads,
    set_deep_io_threads,
    set_io_threads,
)
from headrace.io._ranges import DEFAULT_MAX_GAP, DEFAULT_MAX_SPAN, Coalesced, Ranges, coalesce
from headrace.io._reader import STRATEGIES, RangeReader, ReaderConfig, Strategy
from headrace.io._stats import ReadStats
from headrace.io._store import RangeStore

__all__ = [
    "AdaptivePolicy",
    "Coalesced",
    "DEFAULT_DEEP_IO_THREADS",
    "DEFAULT_IO_THREADS",
    "DEFAULT_MAX_GAP",
    "DEFAULT_MAX_SPAN",
    "LocalFile",
    "PAGE",
    "RangeReader",
    "RangeStore",
    "Ranges",
    "ReadStats",
    "ReaderConfig",
    "STRATEGIES",
    "Strategy",
    "coalesce",
    "deep_io_pool",
    "deep_io_threads",
    "io_pool",
    "io_threads",
    "open_error",
    "page_aligned_empty",
    "set_deep_io_threads",
    "set_io_threads",
]
