"""Cold-file measurements: evict a file's pages, count those in memory, and the bytes
this process read from storage."""

from __future__ import annotations

import os

import numpy as np

from headrace.io import PAGE, LocalFile


def evict(path: str) -> None:
    """Drop the file's pages from the page cache (written back first: DONTNEED drops
    clean pages only)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def resident(path: str) -> int:
    """Bytes of the file's pages in memory now (``mincore``)."""
    with LocalFile(path) as f:
        every = np.arange(0, f.size, PAGE, dtype=np.int64)
        return int(f.resident(every, np.ones_like(every)).sum()) * PAGE


def read_bytes() -> int:
    """Bytes this process has read from storage (``/proc/self/io``)."""
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("read_bytes"))
