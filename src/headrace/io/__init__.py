"""How bytes arrive: local files, object stores, range reads, the I/O pool."""

from __future__ import annotations

import typing
from typing import Any

from headrace.io._buffers import PAGE, page_aligned_empty
from headrace.io._file import LocalFile, open_error
from headrace.io._pool import DEFAULT_IO_THREADS, io_pool, io_threads, set_io_threads

if typing.TYPE_CHECKING:
    from headrace.io._objects import ObjectStats, ObjectStore, Request
    from headrace.io._retry import RetryPolicy

__all__ = [
    "DEFAULT_IO_THREADS",
    "LocalFile",
    "ObjectStats",
    "ObjectStore",
    "PAGE",
    "Request",
    "RetryPolicy",
    "io_pool",
    "io_threads",
    "open_error",
    "page_aligned_empty",
    "set_io_threads",
]

# Object stores need the optional ``obstore`` extra; import it only when asked for.
_LAZY = {
    "ObjectStats": "headrace.io._objects",
    "ObjectStore": "headrace.io._objects",
    "Request": "headrace.io._objects",
    "RetryPolicy": "headrace.io._retry",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'headrace.io' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
