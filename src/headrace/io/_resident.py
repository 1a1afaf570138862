"""Which ranges of a memory map lie on pages in memory now: ``mincore(2)``.

The adaptive reader asks before a mapped read that may fault: a resident page
costs a minor fault (no I/O), a missing one a read from storage, and a mapped
read faults its missing pages one at a time.

Two limits make the answer a hint, never a promise. Pages can be evicted (or
read in) between the question and the read. And since Linux 5.0 ``mincore``
reports the page cache only for files the caller owns or may write; for any
other file it reports only pages mapped into this process, so a page another
process (or our own ``pread``) cached reads as missing. Missing is therefore
the safe answer, and what an error (or a platform without ``mincore``) gives.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = ["drop_pages", "resident_ranges"]

PAGE = mmap.PAGESIZE
JOIN_PAGES = 32

MincoreFn = Callable[[int, int, Any], int]


def _load() -> MincoreFn | None:
    try:
        # PyDLL keeps the GIL for the call: mincore never waits on I/O, and giving
        # the GIL up and back per range costs more than the call.
        fn = ctypes.PyDLL(None).mincore
    except (OSError, AttributeError, TypeError):  # no libc to load, or no mincore in it
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    fn.restype = ctypes.c_int
    return fn


_MINCORE: MincoreFn | None = _load()


def resident_ranges(
    base: int, offsets: NDArray[np.int64], lengths: NDArray[np.int64]
) -> NDArray[np.bool_]:
    """Per range of a mapping at address ``base``: every page it lies on resident?

    Ranges whose pages lie within ``JOIN_PAGES`` of each other share one
    ``mincore`` call (a call costs about as much as 32 pages of it, ~2 us
    here). An empty range lies on no page: resident. All ``False`` where
    ``mincore`` is unavailable, and every range with bytes where it fails (see
    the module's note).
    """
    n = len(offsets)
    fn = _MINCORE
    if fn is None or n == 0:
        return np.zeros(n, dtype=np.bool_)
    keep = lengths > 0
    if not keep.all():
        # An empty range lies on no page: at the map's end (an empty last row), its
        # "page" is past the map, and a call that asks about it fails for every range.
        out = np.ones(n, dtype=np.bool_)
        out[keep] = resident_ranges(base, offsets[keep], lengths[keep])
        return out
    first = offsets // PAGE
    last = (offsets + lengths - 1) // PAGE
    order = np.argsort(first, kind="stable")
    f_s, l_s = first[order], last[order]
    reach = np.maximum.accumulate(l_s)
    # A new group where a range starts past every earlier page by more than JOIN_PAGES.
    new = np.concatenate([[True], f_s[1:] > reach[:-1] + JOIN_PAGES])
    g_first = f_s[new]
    g_last = np.maximum.reduceat(l_s, np.flatnonzero(new))
    g_pages = g_last - g_first + 1
    g_at = np.concatenate([[0], np.cumsum(g_pages)])
    vec = np.zeros(int(g_at[-1]), dtype=np.uint8)
    addr = vec.ctypes.data
    for p, k, at in zip(g_first.tolist(), g_pages.tolist(), g_at[:-1].tolist(), strict=True):
        if fn(base + p * PAGE, k * PAGE, addr + at) != 0:
            return np.zeros(n, dtype=np.bool_)
    # Each range's pages in vec: its group's start plus its offset into the group.
    group = np.cumsum(new) - 1
    lo = np.empty(n, dtype=np.int64)
    lo[order] = g_at[group] + f_s - g_first[group]
    hi = lo + (last - first) + 1
    missing = np.concatenate([[0], np.cumsum((vec & 1) == 0)])
    return np.asarray(missing[hi] == missing[lo], dtype=np.bool_)


def drop_pages(path: str | os.PathLike[str]) -> None:
    """Drop the file's pages from the page cache, so the next reads come from storage
    (``POSIX_FADV_DONTNEED``). It drops clean pages only: a file written moments ago (a
    dataset just generated) kept half its pages, so they are written back first."""
    fd = os.open(path, os.O_RDONLY)
    try:
        with contextlib.suppress(OSError):
            os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
