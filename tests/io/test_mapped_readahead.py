"""Mapped reads of a cold file bring in the pages asked for: the map is advised
random (a fault reads its page, not the kernel's read-around of ``read_ahead_kb``
about it), and a run of consecutive ranges is asked for whole first."""

from __future__ import annotations

import resource
from pathlib import Path

import numpy as np
import pytest

from _cold import evict
from _cold import resident_bytes as _resident
from headrace.io import PAGE, RangeReader
from headrace.io._buffers import ASK

ROW = 4096 + 100  # a row on two pages
ROWS = 4096  # ~16 MiB


@pytest.fixture
def cold(tmp_path: Path) -> tuple[Path, bytes]:
    path = tmp_path / "rows.bin"
    data = np.random.default_rng(0).integers(0, 256, ROW * ROWS, np.uint8).tobytes()
    path.write_bytes(data)
    evict(path)
    return path, data


def test_random_rows_read_mapped_bring_in_their_pages_not_the_read_around(cold) -> None:
    path, data = cold
    rows = np.random.default_rng(1).choice(ROWS, 32, replace=False)
    with RangeReader("mmap") as r:
        got = r.read_rows(str(path), rows, ROW)
    assert got.tobytes() == b"".join(data[i * ROW : (i + 1) * ROW] for i in rows.tolist())
    # Each row lies on 2 or 3 pages; before: 128 KiB (the default read_ahead_kb) to
    # 8 MiB about each row's first fault.
    assert _resident(path) <= 32 * 3 * PAGE


def test_a_run_read_mapped_is_asked_for_whole_not_faulted_page_by_page(cold) -> None:
    path, data = cold
    first = 1000
    rows = np.arange(first, first + 256)  # ~1 MiB of consecutive rows: one run
    with RangeReader("mmap") as r:
        before = resource.getrusage(resource.RUSAGE_THREAD).ru_majflt
        got = r.read_rows(str(path), rows, ROW)
        faults = resource.getrusage(resource.RUSAGE_THREAD).ru_majflt - before
    assert got.tobytes() == data[first * ROW : (first + 256) * ROW]
    # Asked for in 128 KiB pieces, the copy waits on a few; a fault a page: 257.
    assert faults <= 2 * 256 * ROW // ASK + 2, faults
    assert _resident(path) <= 256 * ROW + 2 * PAGE
