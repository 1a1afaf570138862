"""Direct mapped indexing: requests are slices of the file's memory map.

Nothing is read ahead of time: the caller's copy out of the map *is* the
read, one page fault at a time. NumPy holds the GIL through those faults, so
mapped reads never overlap in threads; that is why the adaptive policy moves
to parallel positional reads when faults are slow.

A mapping of a file that was truncated while open delivers SIGBUS on access
to the vanished pages, which kills the process. So every mapped read first
asks ``fstat`` for the size now (about a microsecond) and refuses ranges past
it with a clear error. A truncation racing between that check and the copy is
still fatal; only a lock held by every writer could close that window.

A page the storage fails to read is SIGBUS as well. On a network or FUSE
mount (an NFS soft mount timing out, a FUSE driver whose backend fails) that
is a real risk, so there a mapped read first faults its pages in with
``MADV_POPULATE_READ`` (:func:`populate_ranges`), which answers an error
instead, and the copy then finds them in memory. On a local disk that costs a
system call per run of pages for an error a disk rarely gives, so it is not
done there (docs/io.md#errors-and-lifetimes).
"""

from __future__ import annotations

import mmap

import numpy as np
from numpy.typing import NDArray

from headrace.errors import ReadEOFError
from headrace.io._buffers import PAGE, ask_for, populate_file
from headrace.io._file import LocalFile
from headrace.io._ranges import coalesce_arrays

__all__ = [
    "LONG_RUN",
    "ask_for_runs",
    "mapped_view",
    "pages_of_ranges",
    "pages_touched",
    "populate_ranges",
]

#: Consecutive ranges of a mapped read spanning this many bytes are asked for first.
LONG_RUN = 16 * PAGE
#: Page runs this close are populated by one call unless the reader's ``max_gap``
#: says otherwise (the pages between are read too: fewer, longer READs for more
#: bytes, as positional reads' coalescing); the run is cut at 1 MiB, as the map
#: fill cuts it.
_GAP = 64 << 10
_RUN = 1 << 20


def mapped_view(f: LocalFile, end: int) -> NDArray[np.uint8] | None:
    """The whole map as bytes, checked safe up to ``end``; ``None`` if unmapped there.

    ``None`` means the file grew past its mapping since it was mapped: the
    caller reads those bytes positionally instead.
    """
    size = f.current_size()
    if end > size:
        shrank = f" (it had {f.size} bytes when opened: it shrank)" if size < f.size else ""
        raise ReadEOFError(
            f"{f.path}: mapped read up to byte {end} is past the end of the file, which has "
            f"{size} bytes{shrank}"
        )
    if end == 0:
        return np.zeros(0, dtype=np.uint8)
    if f.size == 0:
        return None  # empty when opened (nothing to map), it has grown since
    m = f.mapped
    if end > len(m):
        return None
    return np.frombuffer(m, dtype=np.uint8)


def pages_touched(
    offsets: NDArray[np.int64], lengths: NDArray[np.int64], page: int = mmap.PAGESIZE
) -> int:
    """Bytes of the distinct pages the ranges touch: what their page faults read at least.

    A mapped read is counted by the pages it faults in, not by the bytes asked for
    (a 1,025-byte row faults a 4 KiB page); the kernel's read-around may read more.
    """
    keep = lengths > 0
    if not keep.any():
        return 0
    first = offsets[keep] // page
    last = (offsets[keep] + lengths[keep] - 1) // page
    order = np.argsort(first, kind="stable")
    first, last = first[order], last[order]
    # Pages of range i not already counted by an earlier (lower-starting) range.
    before = np.maximum.accumulate(np.concatenate([[-1], last[:-1]]))
    return int(np.maximum(last - np.maximum(first - 1, before), 0).sum()) * page


def pages_of_ranges(
    offsets: NDArray[np.int64], lengths: NDArray[np.int64], page: int = mmap.PAGESIZE
) -> int:
    """Bytes of the pages each range lies on, a page two ranges share counted for each.

    What a mapped read's faults cost, counted per row as the naive per-row memmap is;
    a few array operations (~4 us for a batch), where the exact union of pages
    (:func:`pages_touched`) sorts them (~15 us): a mapped read of 32 rows takes ~55 us.
    """
    spanned = (offsets + lengths + page - 1) // page - offsets // page
    return int(np.minimum(spanned, lengths).sum()) * page  # (an empty range: no page)


def ask_for_runs(
    view: NDArray[np.uint8], offsets: NDArray[np.int64], lengths: NDArray[np.int64]
) -> None:
    """Ask for (``MADV_WILLNEED``) the runs of ranges of ``view`` (the whole map of a
    file, advised random) that follow each other in the caller's order (consecutive
    rows, a window) and span at least :data:`LONG_RUN` bytes: their copy would fault
    them in a page, and a read, at a time. Shorter runs (a row at random) are left to
    the copy, which reads their pages only."""
    if offsets.size < 2:
        starts, stops = offsets, offsets + lengths
    else:
        ends = offsets + lengths
        cut = np.flatnonzero(offsets[1:] != ends[:-1]) + 1
        starts = offsets[np.concatenate([[0], cut])]
        stops = ends[np.concatenate([cut - 1, [offsets.size - 1]])]
    long = stops - starts >= LONG_RUN
    if not long.any():
        return
    base = view.ctypes.data
    for lo, hi in zip(starts[long].tolist(), stops[long].tolist(), strict=True):
        first = lo // PAGE * PAGE
        ask_for(base + first, hi - first)


def populate_ranges(
    f: LocalFile,
    view: NDArray[np.uint8],
    offsets: NDArray[np.int64],
    lengths: NDArray[np.int64],
    max_gap: int = _GAP,
) -> None:
    """Fault in the pages of ``view`` (the whole map of ``f``) that the ranges lie
    on, so that a copy out of them cannot meet SIGBUS: a page the storage cannot
    read is a :class:`~headrace.errors.StorageError` naming the file and bytes here.
    Runs of pages ``max_gap`` bytes apart or closer are populated as one (the
    reader's ``max_gap``: 0 reads the rows' pages only).

    A page evicted between this and the copy faults again there (a small window,
    on a machine short of memory). A kernel without the advice (before 5.14),
    or an interrupted call, leaves the pages to the copy.
    """
    keep = lengths > 0
    if not keep.any():
        return
    page = mmap.PAGESIZE
    first = offsets[keep] // page * page
    end = np.minimum(
        -(-(offsets[keep] + lengths[keep]) // page) * page, -(-view.size // page) * page
    )
    runs = coalesce_arrays(first, end - first, max_gap=max_gap, max_span=_RUN)
    base = view.ctypes.data
    last = int((offsets + lengths).max())

    def check_size() -> None:
        mapped_view(f, last)  # raises for a file that shrank under the map

    spans = list(zip(runs.starts.tolist(), runs.ends.tolist(), strict=True))
    # Every run asked for first, none waited for: each populate below then waits for
    # pages already in flight. Asked for one at a time, run after run paid a round
    # trip of its own: 1,024 random rows read mapped through slowfs at 2 ms a READ
    # took 23 batches/s, 182 asked for first (2026-12-07).
    for lo, hi in spans:
        ask_for(base + lo, hi - lo)
    for lo, hi in spans:
        if not populate_file(base + lo, hi - lo, f.path, lo, min(hi, view.size), check_size):
            return  # no advice here (before 5.14): the copy faults them in, as before
