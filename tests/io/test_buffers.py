from __future__ import annotations

import errno
import mmap

import numpy as np
import pytest

from headrace.io import PAGE, madvise, page_aligned_empty


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
