"""How bytes arrive: local files, object stores, range reads, coalescing, the I/O pools.

The local engine is :class:`RangeReader`: give it a path and ``(offset, length)``
ranges (or fixed-width row indices) and it returns the bytes in caller order,
whatever order it read them in. Strategies: ``"mmap"``, ``"pread"``,
``"odirect"``, ``"odirect-serial"`` and ``"adaptive"`` (see
:class:`ReaderConfig`); positional reads run on io_uring or on threads
(``ENGINES``); every combination returns identical bytes. Object stores go through
:class:`ObjectStore` (the optional ``obstore`` extra, imported lazily);
:class:`RequestQueue` keeps many of their coroutines in flight for callers on threads.
:func:`reads_in_flight` lists the reads of either kind running now, oldest first.
"""

from __future__ import annotations

import importlib.util as _util
import typing

from headrace._lazy import lazy_names as _lazy_names

# Imported now (headrace.io._exit registers its exit handler on import): before the
# Loader's handler, so that one runs first, and whatever store comes later is covered.
from headrace.io import _exit  # noqa: F401
from headrace.io._adaptive import AdaptivePolicy
from headrace.io._buffers import PAGE, madvise, page_aligned_empty
from headrace.io._cache import CacheStats, ObjectCache, open_cache
from headrace.io._file import LocalFile, file_url_path, open_error
from headrace.io._in_flight import ReadInFlight, reads_in_flight
from headrace.io._pool import (
    DEFAULT_DEEP_IO_THREADS,
    DEFAULT_IO_THREADS,
    cache_pool,
    deep_io_pool,
    deep_io_threads,
    io_pool,
    io_threads,
    set_deep_io_threads,
    set_io_threads,
    usable_cpus,
)
from headrace.io._ranges import DEFAULT_MAX_GAP, DEFAULT_MAX_SPAN, Coalesced, Ranges, coalesce
from headrace.io._reader import (
    ENGINES,
    STRATEGIES,
    Engine,
    RangeReader,
    ReaderConfig,
    Strategy,
)
from headrace.io._requests import QueueStats, RequestQueue
from headrace.io._stats import ReadStats
from headrace.io._store import RangeStore

if typing.TYPE_CHECKING:
    from headrace.io._object_info import ObjectInfo, Request
    from headrace.io._object_stats import ObjectStats
    from headrace.io._objects import ObjectStore
    from headrace.io._retry import RetryPolicy

__all__ = [
    "AdaptivePolicy",
    "CacheStats",
    "Coalesced",
    "DEFAULT_DEEP_IO_THREADS",
    "DEFAULT_IO_THREADS",
    "DEFAULT_MAX_GAP",
    "DEFAULT_MAX_SPAN",
    "ENGINES",
    "Engine",
    "LocalFile",
    "ObjectCache",
    "ObjectInfo",
    "ObjectStats",
    "ObjectStore",
    "PAGE",
    "QueueStats",
    "RangeReader",
    "RangeStore",
    "Ranges",
    "ReadInFlight",
    "ReadStats",
    "ReaderConfig",
    "Request",
    "RequestQueue",
    "RetryPolicy",
    "STRATEGIES",
    "Strategy",
    "cache_pool",
    "coalesce",
    "deep_io_pool",
    "deep_io_threads",
    "file_url_path",
    "io_pool",
    "io_threads",
    "madvise",
    "open_cache",
    "open_error",
    "page_aligned_empty",
    "reads_in_flight",
    "set_deep_io_threads",
    "set_io_threads",
    "usable_cpus",
]


def _have_obstore() -> bool:
    """Whether obstore can be imported, without importing it (a blocked or broken
    install: no)."""
    try:
        return _util.find_spec("obstore") is not None
    except (ImportError, ValueError):
        return False


if not typing.TYPE_CHECKING and not _have_obstore():
    # ``from headrace.io import *`` takes every name in __all__: with NumPy alone it
    # raised ModuleNotFoundError (until 2026-12-07). ``from headrace.io import
    # ObjectStore`` still says which extra to install (see headrace._lazy). (Checkers
    # see the whole list: the name is typed, as its extra is in a checked install.)
    __all__.remove("ObjectStore")

# Object stores need the optional ``obstore`` extra; import it only when asked for.
_LAZY = {
    "ObjectInfo": "headrace.io._object_info",
    "ObjectStats": "headrace.io._object_stats",
    "ObjectStore": "headrace.io._objects",
    "Request": "headrace.io._object_info",
    "RetryPolicy": "headrace.io._retry",
}


__getattr__ = _lazy_names(__name__, _LAZY, globals())
