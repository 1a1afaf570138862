"""Coalesced positional reads: buffered ``pread`` and ``O_DIRECT``.

Both read the coalesced spans back to back into one buffer (one allocation
per call) and report where each request landed, so the caller scatters with
one fancy index. ``os.preadv`` releases the GIL, so spans read in parallel on
the I/O pool really overlap.

O_DIRECT rules (Linux ``open(2)``): the buffer address, the file offset and
the length must all be multiples of the logical block size. 4096 satisfies
every common device, so spans are widened outward to 4096-byte boundaries,
read into a 4096-aligned buffer and sliced. A read of the final block comes
back short (at end of file), which is expected and fine as long as the
requested bytes arrived.
"""

from __future__ import annotations

import errno
import os
from concurrent.futures import Executor
from typing import Any, cast

import numpy as np
from numpy.typing import NDArray

from headrace.errors import ReadEOFError, StorageError
from headrace.io._batch import run_batch
from headrace.io._file import LocalFile
from headrace.io._ranges import chunk_spans, coalesce_arrays

__all__ = ["aligned_empty", "read_direct_into", "read_spans"]

DEFAULT_ALIGNMENT = 4096
# Spans longer than max_span (single huge requests) are split into pieces
# read in parallel, but never below this: tiny pieces cost more in calls than
# they gain in overlap.
MIN_PIECE = 256 * 1024


def aligned_empty(nbytes: int, alignment: int) -> NDArray[np.uint8]:
    """An uninitialised byte array whose first byte is ``alignment``-aligned.

    Over-allocating and slicing keeps the memory owned by NumPy (freed with
    the array, nothing to close or leak), unlike an anonymous ``mmap``.
    """
    raw = np.empty(nbytes + alignment, dtype=np.uint8)
    skip = (-raw.ctypes.data) % alignment
    return raw[skip : skip + nbytes]


def read_direct_into(
    f: LocalFile,
    view: NDArray[np.uint8],
    offset: int,
    need: int,
    alignment: int,
    first: int | None = None,
) -> None:
    """O_DIRECT read of ``len(view)`` bytes at aligned ``offset``; ``need`` must arrive.

    ``view``, ``offset`` and ``len(view)`` are aligned; bytes past ``need``
    may be missing only because the file ends there. ``first`` is the first
    byte the caller asked for (errors name the requested range, not the
    aligned one).
    """
    first = offset if first is None else first
    fd = f.direct_fd
    mv = memoryview(cast(Any, view))
    want = len(view)
    done = 0
    while done < want:
        try:
            n = os.preadv(fd, [mv[done:]], offset + done)
        except OSError as exc:
            raise StorageError(
                exc.errno or errno.EIO,
                f"{f.path}: O_DIRECT read of bytes [{offset}, {offset + want}) failed after "
                f"{done} bytes: {exc.strerror or exc}",
            ) from exc
        if n == 0:
            break
        done += n
        if done % alignment:
            # Only the file's last block comes back unaligned, and O_DIRECT
            # cannot resume at an unaligned offset anyway.
            break
    if done < need:
        size = f.current_size()
        if offset + need > size:
            raise ReadEOFError(
                f"{f.path}: read of bytes [{first}, {offset + need}) reached end of file "
                f"(file has {size} bytes)"
            )
        # POSIX lets a read stop early without reaching EOF; finish buffered
        # rather than issue an unaligned O_DIRECT read.
        f.pread_into(view[done:need], offset + done)


def read_spans(
    f: LocalFile,
    offsets: NDArray[np.int64],
    lengths: NDArray[np.int64],
    *,
    max_gap: int,
    max_span: int,
    depth: int,
    pool: Executor | None,
    alignment: int = 0,
) -> tuple[NDArray[np.uint8], NDArray[np.int64], int]:
    """Read the requests' coalesced spans; return ``(buffer, positions, bytes_read)``.

    Request ``i`` is ``buffer[positions[i] : positions[i] + lengths[i]]``.
    ``alignment > 0`` selects O_DIRECT with that alignment.
    """
    plan = coalesce_arrays(offsets, lengths, max_gap=max_gap, max_span=max_span)
    starts, ends = plan.starts, plan.ends
    if alignment:
        starts = starts // alignment * alignment
        ends = -(-ends // alignment) * alignment
        chunk = max(MIN_PIECE, max_span) // alignment * alignment
    else:
        chunk = max(MIN_PIECE, max_span)
    p_start, p_end, p_pos, owner = chunk_spans(starts, ends, chunk)
    span_pos = p_pos[np.searchsorted(owner, np.arange(len(starts)))]
    total = int((ends - starts).sum())
    buf = aligned_empty(total, alignment) if alignment else np.empty(total, dtype=np.uint8)
    ps, pe, pp = p_start.tolist(), p_end.tolist(), p_pos.tolist()
    if alignment:
        need_end = np.minimum(p_end, plan.ends[owner]).tolist()
        first = np.maximum(p_start, plan.starts[owner]).tolist()

        def read(i: int) -> None:
            a = ps[i]
            view = buf[pp[i] : pp[i] + pe[i] - a]
            read_direct_into(f, view, a, need_end[i] - a, alignment, first[i])

    else:

        def read(i: int) -> None:
            a = ps[i]
            f.pread_into(buf[pp[i] : pp[i] + pe[i] - a], a)

    run_batch(len(ps), read, depth=depth, pool=pool)
    positions = span_pos[plan.span] + (offsets - starts[plan.span])
    return buf, positions, total
