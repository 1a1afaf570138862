"""Which ranges lie on resident pages (mincore), on a real file with pages evicted."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from _cold import evict
from headrace.io import LocalFile
from headrace.io import _resident as res

PAGE = res.PAGE


@pytest.fixture
def cold(tmp_path: Path):
    """A 4 MiB file with none of its pages in memory (skips where eviction is a no-op)."""
    path = tmp_path / "cold.bin"
    path.write_bytes(np.random.default_rng(0).integers(0, 256, 4 << 20, np.uint8).tobytes())
    evict(path)
    f = LocalFile(path)
    yield path, f
    f.close()


def test_resident_ranges_match_the_pages_read(cold) -> None:
    path, f = cold
    read_pages = {3, 4, 10, 200, 201, 202, 900}
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)  # no readahead: just these pages
        for p in read_pages:
            os.pread(fd, 1, p * PAGE)
    finally:
        os.close(fd)
    rng = np.random.default_rng(1)
    offsets = np.concatenate(
        [
            [3 * PAGE, 3 * PAGE + 100, 4 * PAGE - 10, 9 * PAGE, 200 * PAGE + 5, 900 * PAGE],
            [201 * PAGE, 3 * PAGE, 500 * PAGE, 1000 * PAGE - 1],  # repeats, far apart, a straddle
            rng.integers(0, (4 << 20) - 3 * PAGE, 200),
        ]
    ).astype(np.int64)
    lengths = np.concatenate(
        [
            [PAGE, 100, 20, 2 * PAGE, 3 * PAGE - 10, 0],
            [PAGE, PAGE, 0, 2],
            rng.integers(1, 3 * PAGE, 200),
        ]
    ).astype(np.int64)
    got = f.resident(offsets, lengths)
    want = [
        n == 0 or set(range(o // PAGE, (o + n - 1) // PAGE + 1)) <= read_pages
        for o, n in zip(offsets.tolist(), lengths.tolist(), strict=True)
    ]
    assert got.tolist() == want
    assert got[:10].tolist() == [True, True, True, False, True, True, True, True, True, False]


def test_mincore_failing_or_missing_reads_as_not_resident(monkeypatch, tmp_path: Path) -> None:
    path = tmp_path / "warm.bin"
    path.write_bytes(b"x" * (64 * PAGE))
    offsets = np.arange(0, 64 * PAGE, 8 * PAGE, dtype=np.int64)
    lengths = np.full(len(offsets), 100, dtype=np.int64)
    with LocalFile(path) as f:
        f.pread(0, 64 * PAGE)  # just written and read: resident
        assert f.resident(offsets, lengths).all()
        monkeypatch.setattr(res, "_MINCORE", lambda addr, size, vec: -1)  # e.g. ENOMEM
        assert not f.resident(offsets, lengths).any()
        monkeypatch.setattr(res, "_MINCORE", None)  # a platform without mincore
        assert not f.resident(offsets, lengths).any()
        assert f.resident(offsets[:0], lengths[:0]).shape == (0,)


def test_an_empty_range_at_the_end_of_the_map_asks_about_no_page_past_it(
    monkeypatch, tmp_path: Path
) -> None:
    # An empty range at the file's end (an empty last row) lies on no page. Asking
    # mincore about the page after the map fails (ENOMEM) wherever nothing is
    # mapped there, and a failed call reads every range as missing.
    path = tmp_path / "warm.bin"
    path.write_bytes(b"x" * (16 * PAGE))
    real = res._MINCORE
    assert real is not None
    asked: list[tuple[int, int]] = []

    def recording(addr: int, size: int, vec: int) -> int:
        asked.append((addr, addr + size))
        return real(addr, size, vec)

    monkeypatch.setattr(res, "_MINCORE", recording)
    with LocalFile(path) as f:
        f.pread(0, 16 * PAGE)  # just written and read: resident
        base = np.frombuffer(f.mapped, dtype=np.uint8).ctypes.data
        offsets = np.array([0, 16 * PAGE, 3 * PAGE, 16 * PAGE - 1], dtype=np.int64)
        lengths = np.array([100, 0, 0, 1], dtype=np.int64)
        assert f.resident(offsets, lengths).tolist() == [True, True, True, True]
    assert asked and all(base <= a < b <= base + 16 * PAGE for a, b in asked), asked
