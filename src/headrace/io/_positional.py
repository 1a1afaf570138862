"""Coalesced positional reads: buffered ``pread`` and ``O_DIRECT``.

Both read the coalesced spans back to back into one buffer (one allocation
per call) and report where each request landed, so the caller scatters with
one fancy index. Two engines run the reads: ``os.preadv`` on the I/O pool
(it releases the GIL, so spans read in parallel really overlap), or one
io_uring ring filled and reaped by the calling thread (``_uring.py``). Both
complete short reads and report failures alike.

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
from headrace.io import _in_flight as in_flight
from headrace.io._batch import raise_lowest, run_batch
from headrace.io._file import LocalFile, eof_error, read_error
from headrace.io._ranges import chunk_spans, coalesce_arrays
from headrace.io._uring import TRANSIENT_TRIES, Ring

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
    key = in_flight.begin(f.path, offset, offset + want)
    try:
        while done < want:
            try:
                n = os.preadv(fd, [mv[done:]], offset + done)
            except OSError as exc:
                raise read_error(f.path, "O_DIRECT read", offset, want, done, exc) from exc
            if n == 0:
                break
            done += n
            if done % alignment:
                # Only the file's last block comes back unaligned, and O_DIRECT
                # cannot resume at an unaligned offset anyway.
                break
    finally:
        in_flight.end(key)
    finish_direct(f, view, offset, need, done, first)


def finish_direct(
    f: LocalFile, view: NDArray[np.uint8], offset: int, need: int, done: int, first: int
) -> None:
    """After O_DIRECT stopped at ``done`` bytes: an EOF error, or finish buffered."""
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
    ring: Ring | None = None,
) -> tuple[NDArray[np.uint8], NDArray[np.int64], int]:
    """Read the requests' coalesced spans; return ``(buffer, positions, bytes_read)``.

    Request ``i`` is ``buffer[positions[i] : positions[i] + lengths[i]]``.
    ``alignment > 0`` selects O_DIRECT with that alignment. With a ``ring``
    the reads go through io_uring, ``depth`` at a time, and ``pool`` is unused.
    """
    plan = coalesce_arrays(offsets, lengths, max_gap=max_gap, max_span=max_span)
    starts, ends = plan.starts, plan.ends
    if alignment:
        starts = starts // alignment * alignment
        ends = -(-ends // alignment) * alignment
        # At least one block: an alignment above max(MIN_PIECE, max_span) rounded the
        # piece down to 0 bytes (a division by zero splitting the spans).
        chunk = max(alignment, max(MIN_PIECE, max_span) // alignment * alignment)
    else:
        chunk = max(MIN_PIECE, max_span)
    p_start, p_end, p_pos, owner = chunk_spans(starts, ends, chunk)
    span_pos = p_pos[np.searchsorted(owner, np.arange(len(starts)))]
    total = int((ends - starts).sum())
    buf = aligned_empty(total, alignment) if alignment else np.empty(total, dtype=np.uint8)
    positions = span_pos[plan.span] + (offsets - starts[plan.span])
    if alignment:
        # The requested bytes of each piece: [first, need_end) within [start, end).
        need_end = np.minimum(p_end, plan.ends[owner])
        first = np.maximum(p_start, plan.starts[owner])
    else:
        need_end = first = p_end
    if ring is not None:
        _ring_read(ring, f, buf, p_start, p_end - p_start, p_pos, need_end, first, alignment, depth)
        return buf, positions, total
    ps, pe, pp = p_start.tolist(), p_end.tolist(), p_pos.tolist()
    if alignment:
        need_end_l, first_l = need_end.tolist(), first.tolist()

        def read(i: int) -> None:
            a = ps[i]
            view = buf[pp[i] : pp[i] + pe[i] - a]
            read_direct_into(f, view, a, need_end_l[i] - a, alignment, first_l[i])

    else:

        def read(i: int) -> None:
            a = ps[i]
            f.pread_into(buf[pp[i] : pp[i] + pe[i] - a], a)

    run_batch(len(ps), read, depth=depth, pool=pool)
    return buf, positions, total


def _ring_read(
    ring: Ring,
    f: LocalFile,
    buf: NDArray[np.uint8],
    start: NDArray[np.int64],
    length: NDArray[np.int64],
    pos: NDArray[np.int64],
    need_end: NDArray[np.int64],
    first: NDArray[np.int64],
    alignment: int,
    depth: int,
) -> None:
    """Pieces ``[start, start + length)`` into ``buf[pos:]`` through ``ring``.

    What the thread engine does per read, done here per batch: completions
    that stopped short of the requested bytes end as the same EOF errors or
    buffered O_DIRECT tails, failures as the same errors, the lowest piece's
    raised first.
    """
    fd = f.direct_fd if alignment else f.fd
    addr = (buf.ctypes.data + pos).astype(np.uint64)
    # The batch's pieces are entered as one read: the bytes from its first to its last.
    lo = int(start.min()) if len(start) else 0  # not min(initial=0): that is always 0
    key = in_flight.begin(f.path, lo, int((start + length).max(initial=0)))
    try:
        done, err = ring.read(fd, addr, start, length, depth=depth, align=alignment, owner=buf)
    except OSError as exc:  # io_uring_enter itself failed: the ring is broken, not the file
        raise StorageError(
            exc.errno or errno.EIO,
            f"{f.path}: io_uring failed during a batch of {len(start)} reads "
            f"({exc.strerror or exc}); engine='threads' avoids io_uring",
        ) from exc
    finally:
        in_flight.end(key)
    need = need_end - start
    bad = np.flatnonzero((err != 0) | ((done >= 0) & (done < need)))
    if not len(bad):
        return
    what = "O_DIRECT read" if alignment else "read"
    failures: list[tuple[int, BaseException]] = []
    for i in bad.tolist():
        a, n, d, e = int(start[i]), int(length[i]), int(done[i]), int(err[i])
        try:
            if e:
                cause = OSError(e, os.strerror(e))
                error = read_error(f.path, what, a, n, d, cause)
                if e in (errno.EINTR, errno.EAGAIN):
                    error.add_note(
                        f"io_uring failed this read {TRANSIENT_TRIES + 1} times; "
                        "engine='threads' reads without io_uring"
                    )
                raise error from cause
            if alignment:
                view = buf[int(pos[i]) : int(pos[i]) + n]
                finish_direct(f, view, a, int(need[i]), d, int(first[i]))
            else:
                raise eof_error(f.path, a, n, d, f.current_size())
        except Exception as exc:  # raised below, lowest piece first, as run_batch does
            failures.append((i, exc))
    raise_lowest(failures)
