"""Files with none of their pages in memory, and how many of their pages are."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from headrace.io import PAGE, LocalFile
from headrace.io._resident import drop_pages


def evict(path: Path) -> None:
    """Drop the file's pages from the page cache; skip the test where they stay (tmpfs)."""
    drop_pages(path)
    if resident_bytes(path):
        pytest.skip(f"{path.parent}: pages stay resident after POSIX_FADV_DONTNEED (tmpfs?)")


def resident_bytes(path: Path) -> int:
    """Bytes of the file's pages in memory now (``mincore`` on a map of our own file)."""
    with LocalFile(path) as f:
        every = np.arange(0, f.size, PAGE, dtype=np.int64)
        return int(f.resident(every, np.ones_like(every)).sum()) * PAGE
