"""Cold-file measurements: evict a file's pages (``evict``: headrace's ``drop_pages``),
count those in memory, and the bytes this process read from storage."""

from __future__ import annotations

import numpy as np

from headrace.io import PAGE, LocalFile
from headrace.io._resident import drop_pages as evict

__all__ = ["evict", "read_bytes", "resident"]


def resident(path: str) -> int:
    """Bytes of the file's pages in memory now (``mincore``)."""
    with LocalFile(path) as f:
        every = np.arange(0, f.size, PAGE, dtype=np.int64)
        return int(f.resident(every, np.ones_like(every)).sum()) * PAGE


def read_bytes() -> int:
    """Bytes this process has read from storage (``/proc/self/io``)."""
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("read_bytes"))
