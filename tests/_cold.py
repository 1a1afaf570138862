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


class FakeClock:
    """A reader's clock that moves only when told (``now``)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class ColdFile(LocalFile):
    """A LocalFile whose pages are never resident and whose row read alone (the
    adaptive check's sample) costs ``row_s`` of ``clock``'s time: slow storage."""

    clock: FakeClock
    row_s = 0.005

    def pread(self, offset, length):  # type: ignore[no-untyped-def]
        self.clock.now += self.row_s
        return super().pread(offset, length)

    def resident(self, offsets, lengths):  # type: ignore[no-untyped-def]
        return np.zeros(len(offsets), dtype=bool)


def cold_opener(clock: FakeClock):  # type: ignore[no-untyped-def]
    """A RangeReader ``opener`` of :class:`ColdFile` on ``clock``."""

    def opener(p: str) -> ColdFile:
        f = ColdFile(p)
        f.clock = clock
        return f

    return opener
