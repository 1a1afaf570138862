"""How bytes arrive: local files, object stores, range reads, the I/O pool."""

from headrace.io._buffers import PAGE, page_aligned_empty
from headrace.io._file import LocalFile, open_error
from headrace.io._pool import DEFAULT_IO_THREADS, io_pool, io_threads, set_io_threads

__all__ = [
    "DEFAULT_IO_THREADS",
    "LocalFile",
    "PAGE",
    "io_pool",
    "io_threads",
    "open_error",
    "page_aligned_empty",
    "set_io_threads",
]
