"""A streamed Parquet row group's bytes on object storage: fetched as the decoder reads them.

A row group larger than ``window_rows`` is decoded as a stream
(:mod:`~headrace.formats._table_stream`): pyarrow, with ``pre_buffer`` off and a
1 MiB read buffer, reads each column chunk from its first byte to its last, in
reads of 1 MiB (or one page, when a page is larger), the chunks of several
columns in turn as a batch needs their values. Fetching the group's chunks
whole held its compressed size (338 MB for 1,048,576 rows of 64-256 int32
tokens). :class:`ChunkStream` is the file pyarrow reads instead: per column
chunk, ranged GETs of ``AHEAD_PIECE`` bytes are issued ``AHEAD_DEPTH`` ahead of
the decoder's place and dropped once it reads past them, so a stream holds at
most about ``columns * (AHEAD_DEPTH + 1) * AHEAD_PIECE`` fetched bytes, whatever
the group's size. A read outside the chunks (a writer whose chunk sizes are off)
is one GET of its own, counted as a miss, never a wrong value.

What a stream holds is counted (:class:`HeldBytes`) as it is issued and dropped,
not timed: the same reads hold the same bytes.
"""

from __future__ import annotations

import bisect
import threading
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from headrace.io._waits import result

if TYPE_CHECKING:
    from headrace.formats._object_files import RemoteFile

__all__ = ["AHEAD_DEPTH", "AHEAD_PIECE", "ChunkStream", "HeldBytes", "ReadOnlyFile"]

# One GET of a streamed column chunk. Two of pyarrow's 1 MiB reads a GET: half the
# requests of 1 MiB pieces, and a read spans at most two pieces.
AHEAD_PIECE = 2 << 20
# GETs ahead of the decoder per column chunk: 8 x 2 MiB a round trip is ~335 MB/s at
# 50 ms, above what one core decodes (~100 MB/s of compressed token lists).
AHEAD_DEPTH = 8


class HeldBytes:
    """Fetched bytes that a table's streams hold (in flight or not read yet): now and at most."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.now = 0
        self.peak = 0

    def add(self, n: int) -> None:
        with self._lock:
            self.now += n
            self.peak = max(self.peak, self.now)

    def drop(self, n: int) -> None:
        with self._lock:
            self.now -= n


class _Piece:
    __slots__ = ("ahead", "buf", "future", "offset")

    def __init__(self, offset: int, buf: NDArray[np.uint8], future: Future[None], ahead: bool):
        self.offset = offset
        self.buf = buf
        self.future = future
        self.ahead = ahead  # issued when the stream was made: maybe by a read-ahead, long ago

    @property
    def end(self) -> int:
        return self.offset + self.buf.size


class _Chunk:
    """One column chunk's ``[start, end)``: its pieces issued and not read past yet."""

    __slots__ = ("end", "next", "pieces", "start")

    def __init__(self, start: int, end: int) -> None:
        self.start = start
        self.end = end
        self.next = start  # where the next piece to issue begins
        self.pieces: deque[_Piece] = deque()


class ReadOnlyFile:
    """A read-only, seekable file of ``_size`` bytes at ``_pos``, as ``pa.PythonFile``
    reads one (seek, then read); subclasses give ``read``."""

    _pos: int
    _size: int

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        base = (0, self._pos, self._size)[whence]
        self._pos = max(0, base + offset)
        return self._pos


class ChunkStream(ReadOnlyFile):
    """A read-only, seekable file of ``size`` bytes for one stream of a row group:
    the column chunks ``chunks`` (``(start, end)``) fetched ahead of the reads, the
    other bytes by ``miss`` (see the module doc). pyarrow reads it through
    ``pa.PythonFile`` (seek, then read; one call at a time).

    Made by a read-ahead (``ahead`` set) or a batch; used by one stream, once
    (:meth:`claim`). ``file``: the object's current handle (reopened after a close).
    """

    def __init__(
        self,
        name: str,
        size: int,
        names: frozenset[str],
        chunks: Sequence[tuple[int, int]],
        file: Callable[[], RemoteFile],
        miss: Callable[[int, int], NDArray[np.uint8]],
        held: HeldBytes,
        *,
        piece: int = AHEAD_PIECE,
        depth: int = AHEAD_DEPTH,
    ) -> None:
        self.name = name
        self.names = names
        self.ahead = False  # made by a read-ahead: its first pieces' failures get one more try
        self._size = size
        self._chunks = [_Chunk(a, b) for a, b in sorted(chunks) if b > a]
        self._starts = [c.start for c in self._chunks]
        self._file = file
        self._miss = miss
        self._held = held
        self._piece = piece
        self._depth = depth
        self._lock = threading.Lock()
        self._pos = 0
        self._claimed = False
        self._error: BaseException | None = None  # a read's failed GET: the stream's
        self.closed = False
        with self._lock:
            for c in self._chunks:  # the first pieces of every chunk
                self._issue(c, c.start + 1, first=True)

    def claim(self) -> bool:
        """Take this for a stream: False when one took it already (or it was closed)."""
        with self._lock:
            ok = not (self._claimed or self.closed)
            self._claimed = True
            return ok

    @property
    def held(self) -> int:
        """Fetched bytes this holds now (in flight, or not read past yet)."""
        with self._lock:
            return sum(p.buf.size for c in self._chunks for p in c.pieces)

    def _issue(self, c: _Chunk, need: int, first: bool = False) -> None:
        """Issue ``c``'s pieces up to ``need`` and ``depth`` pieces in all (under the lock)."""
        while c.next < c.end and (c.next < need or len(c.pieces) < self._depth):
            n = min(self._piece, c.end - c.next)
            buf = np.empty(n, np.uint8)
            self._held.add(n)
            future = self._file().read_into(buf, c.next)
            c.pieces.append(_Piece(c.next, buf, future, first))
            c.next += n

    def _wanted(self, c: _Chunk, a: int, b: int) -> list[_Piece]:
        """The pieces of ``c`` holding ``[a, b)`` (issued now if not yet); those before
        ``a`` dropped: the decoder reads a chunk forwards, once (under the lock)."""
        pieces = c.pieces
        while pieces and pieces[0].end <= a:
            self._held.drop(pieces.popleft().buf.size)
        if (pieces and a < pieces[0].offset) or (not pieces and a != c.next):
            # A read back, or past what was issued: the chunk's pieces start again there.
            # pyarrow reads forwards; this costs GETs, never a wrong byte.
            self._held.drop(sum(p.buf.size for p in pieces))
            pieces.clear()
            c.next = a
        self._issue(c, b)
        return [p for p in pieces if p.offset < b]

    def _wait(self, p: _Piece) -> None:
        try:
            self._waited(p)
        except Exception as exc:
            # pyarrow reads on after a read raised (the next column chunk): the stream
            # failed, and a read-ahead that failed meanwhile is not fetched again for it
            # (a stalled store: the first error said after twice the retry policy's time).
            self._error = exc
            raise

    def _waited(self, p: _Piece) -> None:
        ended = p.future.done()
        try:
            result(p.future)
        except Exception:
            if not (p.ahead and self.ahead and ended):
                raise
            # Started by a read-ahead that had failed before this read came to it (long
            # ago, or before the store closed): the read tries once more, as a row
            # group's read-ahead is retried. One still in flight, waited on, had its
            # tries for this read (fetched again, a store that stopped answering took
            # twice the retry policy's time to be said, every try logged twice).
            p.ahead = False
            p.future = self._file().read_into(p.buf, p.offset)
            result(p.future)

    # -- the file pyarrow reads -------------------------------------------------------
    def read(self, n: int | None = -1) -> bytes | memoryview:
        end = self._size if n is None or n < 0 else min(self._size, self._pos + n)
        pos, self._pos = self._pos, max(self._pos, end)
        parts: list[NDArray[np.uint8]] = []
        while pos < end:
            k = bisect.bisect_right(self._starts, pos) - 1
            c = self._chunks[k] if k >= 0 else None
            if c is None or pos >= c.end:
                nxt = self._starts[k + 1] if k + 1 < len(self._starts) else end
                gap = min(end, nxt) - pos
                parts.append(self._miss(pos, gap))
                pos += gap
                continue
            stop = min(end, c.end)
            if self._error is not None:
                raise self._error
            with self._lock:
                if self.closed:
                    raise ValueError(f"{self.name}: read of a closed stream")
                pieces = self._wanted(c, pos, stop)
            for p in pieces:  # not under the lock: close() must not wait for a GET
                self._wait(p)
                parts.append(p.buf[max(pos, p.offset) - p.offset : min(stop, p.end) - p.offset])
            pos = stop
        if len(parts) == 1:
            return parts[0].data  # zero-copy: pyarrow keeps a reference
        return b"".join(p.tobytes() for p in parts)

    def discard(self) -> None:
        """Close this unless a stream took it (a read-ahead not needed, or replaced)."""
        with self._lock:
            if self._claimed:
                return
        self.close()

    def close(self) -> None:
        """Drop every piece (GETs in flight finish into buffers no one reads)."""
        self._error = None  # its traceback holds a frame of this stream's: a cycle
        with self._lock:
            self.closed = True
            for c in self._chunks:
                self._held.drop(sum(p.buf.size for p in c.pieces))
                c.pieces.clear()
