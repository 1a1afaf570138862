from __future__ import annotations

import errno
import mmap
import os
import resource
from pathlib import Path

import numpy as np
import pytest

from headrace.io import PAGE, madvise, page_aligned_empty
from headrace.io._buffers import ASK, populate_file, read_randomly
from headrace.io._resident import resident_ranges


def test_page_aligned_empty_is_aligned_and_writable() -> None:
    buf = page_aligned_empty(3 * PAGE + 5)
    assert buf.size == 3 * PAGE + 5
    assert buf.ctypes.data % PAGE == 0
    buf[:] = 7
    assert int(buf.sum()) == 7 * buf.size


def test_madvise_acts_on_the_views_own_pages() -> None:
    # DONTNEED on a private anonymous map gives zero pages back: the call reached the
    # kernel with this view's address, and only for the range asked.
    m = mmap.mmap(-1, 4 * PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    view = np.frombuffer(m, dtype=np.uint8)
    view[:] = 1
    madvise(view, PAGE, 2 * PAGE, mmap.MADV_DONTNEED)
    assert view[:PAGE].min() == 1
    assert view[PAGE : 3 * PAGE].max() == 0
    assert view[3 * PAGE :].min() == 1
    del view
    m.close()


def test_madvise_populates_a_file_map(tmp_path) -> None:  # type: ignore[no-untyped-def]
    data = np.arange(3 * PAGE, dtype=np.uint8)
    (tmp_path / "f").write_bytes(data.tobytes())
    with (tmp_path / "f").open("rb") as fh:
        m = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        view = np.frombuffer(m, dtype=np.uint8)
        madvise(view, 0, view.size, 22)  # MADV_POPULATE_READ (Linux >= 5.14)
        assert np.array_equal(view, data)
        del view
        m.close()


def test_madvise_refuses_bad_ranges_and_reports_errno() -> None:
    m = mmap.mmap(-1, 2 * PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    view = np.frombuffer(m, dtype=np.uint8)
    with pytest.raises(ValueError, match="not within the map"):
        madvise(view, PAGE, 2 * PAGE, mmap.MADV_DONTNEED)
    with pytest.raises(ValueError, match="not within the map"):
        madvise(view, 100, PAGE, mmap.MADV_DONTNEED)
    with pytest.raises(OSError) as info:
        madvise(view, 0, PAGE, 12345)  # no such advice
    assert info.value.errno == errno.EINVAL


def test_madvise_refuses_memory_that_is_not_a_whole_map() -> None:
    with pytest.raises(ValueError, match="whole memory map"):
        madvise(np.zeros(4 * PAGE, dtype=np.uint8), 0, PAGE, mmap.MADV_DONTNEED)
    m = mmap.mmap(-1, 4 * PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    part = np.frombuffer(m, dtype=np.uint8)[PAGE:]
    with pytest.raises(ValueError, match="whole memory map"):
        madvise(part, 0, PAGE, mmap.MADV_DONTNEED)


def test_populate_read_wants_a_page_aligned_address() -> None:
    from headrace.io._buffers import populate_read

    with pytest.raises(ValueError, match="not page-aligned"):
        populate_read(PAGE + 1, 10)


def _cold_map(path: Path, nbytes: int) -> mmap.mmap:
    path.write_bytes(np.random.default_rng(0).integers(0, 256, nbytes, np.uint8).tobytes())
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        return mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    finally:
        os.close(fd)


def _resident(at: int, lo: int, n: int) -> bool:
    return bool(resident_ranges(at, np.array([lo]), np.array([n]))[0])


def test_a_populate_under_random_advice_asks_for_its_run_not_page_by_page(tmp_path: Path) -> None:
    # A map advised random faults in one page, one read, at a time: a populate of
    # 1 MiB took 256 major faults. Asked for first (ask_for), its pages arrive in a
    # few reads, which the populate waits for; nothing past the run is read.
    m = _cold_map(tmp_path / "f", 2 << 20)  # unmapped when the test's frame goes
    view = np.frombuffer(m, dtype=np.uint8)
    at = view.ctypes.data
    if any(_resident(at, p, PAGE) for p in range(0, 2 << 20, PAGE)):
        pytest.skip(f"{tmp_path}: pages stay resident after POSIX_FADV_DONTNEED (tmpfs?)")
    read_randomly(at, view.size)
    before = resource.getrusage(resource.RUSAGE_THREAD).ru_majflt
    assert populate_file(at + PAGE, 1 << 20, "f", PAGE, PAGE + (1 << 20), lambda: None)
    faults = resource.getrusage(resource.RUSAGE_THREAD).ru_majflt - before
    assert faults <= 2 * (1 << 20) // ASK, faults
    assert _resident(at, PAGE, 1 << 20)
    assert not _resident(at, PAGE + (1 << 20), PAGE)
    assert not _resident(at, 0, PAGE)
    expect = (tmp_path / "f").read_bytes()[PAGE : PAGE + (1 << 20)]
    assert bytes(view[PAGE : PAGE + (1 << 20)]) == expect
