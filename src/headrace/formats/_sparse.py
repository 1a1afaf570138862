"""A file of which only the byte ranges fetched are held: :class:`SparseImage`.

An anonymous mapping of the file's size that a parser (h5py, zipfile, the NPY
header reader) reads as a file; a read of bytes not held fetches them, a block at
least. Remote HDF5 files read by ranges are held so
(:mod:`~headrace.formats._hdf5_ranges`), and so is each file whose sample count is
read from its header (:mod:`~headrace.formats._file_counts`).
"""

from __future__ import annotations

import bisect
import mmap
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from headrace.formats._buffer import SeekableFile
from headrace.io._ranges import merge_ranges

if TYPE_CHECKING:
    from headrace.formats._hdf5_ranges import FileLayout
    from headrace.io import LocalFile

__all__ = ["BLOCK", "MAX_GAP", "WALK_CAP", "WALK_SKIP", "MappedImage", "SparseImage", "Span"]

#: The least a read on demand fetches: parsers read headers in pieces of 8 to 600
#: bytes (HDF5 metadata, a zip directory), most of them near each other.
BLOCK = 4096
#: Neighbouring ranges closer than this are one GET (a gap costs less than a round trip).
MAX_GAP = 64 << 10

#: The most a walk's read on demand fetches (while ``walking``): a header chain's next
#: read is known only from the last one, so on object storage each read that misses
#: costs a round trip, and a span of about latency x bandwidth (20 ms x 200 MB/s) no
#: more than that. Each miss fetches twice the last span, or twice the bytes the walk
#: skipped since it, whichever is more, up to this.
WALK_CAP = 4 << 20
#: A walk that skips this much or more (members this large) fetches ``BLOCK`` a miss,
#: as before: a span would hold few headers for many bytes, which a walk of many
#: shards at once pays in bandwidth shared by all.
WALK_SKIP = WALK_CAP // 8

#: Files up to this size are held in a heap buffer, larger ones in a sparse mapping.
HEAP_BYTES = 256 << 10

Span = tuple[int, int]  # [start, end)

# Python's mmap module names MAP_NORESERVE from 3.13 on; Linux's value before that.
_NORESERVE = getattr(mmap, "MAP_NORESERVE", 0x4000 if sys.platform.startswith("linux") else 0)


class SparseImage(SeekableFile):
    """A read-only file of ``size`` bytes, of which only the ranges fetched are held.

    ``fetch(spans, buf)`` fills ``buf[a:b]`` for each span (all in flight at once,
    returning when every one is written, raising the first error). A read of bytes
    not held fetches them (at least ``BLOCK``) and records the range in
    ``on_demand``. While ``walking`` (a forward walk of a header chain: tar, TFRecord
    on object storage), each read on demand fetches a growing span, up to
    ``WALK_CAP`` (``BLOCK`` after a skip of ``WALK_SKIP`` or more), and the bytes
    before it are let go (held: the span last fetched).
    Remote HDF5 files read by ranges are held as these
    (``layout``: what the file's first open learned, once it has), and so is each
    file whose count is read from its header (``samples_per_file="header"``).
    """

    def __init__(
        self,
        size: int,
        fetch: Callable[[list[Span], NDArray[np.uint8]], None],
        name: str,
        *,
        mapped: NDArray[np.uint8] | None = None,
    ) -> None:
        super().__init__(size)
        self.name = name
        self._fetch = fetch
        # Anonymous and private: untouched pages are the shared zero page, so a 2 GB
        # object costs the pages of the ranges written, not 2 GB. MAP_NORESERVE: the
        # kernel's overcommit heuristic refused a mapping larger than RAM + swap (a
        # 50 GB file on a 23 GB machine) though only its written pages are ever used.
        # A small file is a heap buffer: unmapping in a process of many threads stops
        # every core that runs one of them (a TLB shootdown), and counting 2,000 NPY
        # headers (16 threads) took twice as long with a mapping for each file.
        self._map: mmap.mmap | None = None
        if mapped is not None:  # the whole file's bytes (a MappedImage's)
            self._buf = mapped
        elif size <= HEAP_BYTES:
            self._buf = np.zeros(size, np.uint8)
        else:
            flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _NORESERVE
            self._map = mmap.mmap(-1, size, flags=flags)
            self._buf = np.frombuffer(self._map, np.uint8)
        self._starts: list[int] = []  # held spans, sorted and disjoint
        self._ends: list[int] = []
        self._lock = threading.Lock()
        self.nbytes = 0  # bytes written into it (fetched), each once while held
        #: Reads on demand are a forward walk's, while set (see WALK_CAP).
        self.walking = False
        self._span = BLOCK  # a walk's last read on demand
        self._let_go = 0  # a walk's pages before this are given back
        self.gets = 0
        self.on_demand: list[Span] = []
        self.layout: FileLayout | None = None  # HDF5 read by ranges: set once learned
        self.log: list[Span] | None = None  # every read made, while set
        #: While set, the spans to fetch at once after a read of these bytes.
        self.ahead: Callable[[NDArray[np.uint8], int], list[Span]] | None = None
        #: The error of a fetch made inside h5py, which reports it only as its own
        #: OSError ("can't open file", "read failed"): raised in its place.
        self.error: BaseException | None = None

    @property
    def buffer(self) -> NDArray[np.uint8]:
        """The image's bytes, as the file's (zeros where not held): what an NPY read by
        rows decodes, reading only the header and the rows it holds."""
        return self._buf

    # -- what is held ------------------------------------------------------------
    def missing(self, a: int, b: int) -> list[Span]:
        """The parts of ``[a, b)`` not held."""
        out: list[Span] = []
        i = bisect.bisect_right(self._ends, a)
        pos = a
        while pos < b and i < len(self._starts):
            s, e = self._starts[i], self._ends[i]
            if s >= b:
                break
            if s > pos:
                out.append((pos, s))
            pos = max(pos, e)
            i += 1
        if pos < b:
            out.append((pos, b))
        return out

    def _add(self, a: int, b: int) -> None:
        i = bisect.bisect_left(self._ends, a)
        j = bisect.bisect_right(self._starts, b)
        if i < j:
            a, b = min(a, self._starts[i]), max(b, self._ends[j - 1])
        # What is held, not what was fetched: a GET may refetch a gap held already.
        self.nbytes += (b - a) - sum(
            e - s for s, e in zip(self._starts[i:j], self._ends[i:j], strict=True)
        )
        self._starts[i:j] = [a]
        self._ends[i:j] = [b]

    def fill(self, spans: list[Span], gap: int = MAX_GAP) -> None:
        """Fetch the parts of ``spans`` not held, neighbours joined, in one batch."""
        with self._lock:
            want: list[Span] = []
            for a, b in merge_ranges(spans):
                want.extend(self.missing(max(a, 0), min(b, self.size)))
            # A gap joined into a GET is fetched, but may be held already: cheaper than
            # a second round trip, and the same bytes (checked against the same ETag).
            want = merge_ranges(want, gap)
            if not want:
                return
            self._fetch(want, self._buf)
            for a, b in want:
                self._add(a, b)
            self.gets += len(want)

    def put(self, spans: list[tuple[int, bytes]]) -> None:
        """Hold bytes fetched before (``(offset, bytes)``: this object's, same ETag)."""
        with self._lock:
            for a, data in spans:
                self._buf[a : a + len(data)] = np.frombuffer(data, np.uint8)
                self._add(a, a + len(data))

    def take(self, spans: list[Span]) -> list[tuple[int, bytes]]:
        """Copies of the held bytes of ``spans`` (each held whole)."""
        return [(a, self._buf[a:b].tobytes()) for a, b in spans if not self.missing(a, b)]

    def want(self, rows: NDArray[np.int64]) -> None:
        """Fetch what reading samples ``rows`` needs (as learned), if not held."""
        if self.layout is not None:
            self.fill(self.layout.metadata + self.layout.spans(rows))

    def _on_demand(self, a: int, b: int) -> None:
        """Fetch the parts of ``[a, b)`` not held (at least ``BLOCK`` from each gap)."""
        gaps = self.missing(a, b)
        if gaps:
            if self.walking:
                extended = [self._walk_span(a, gaps[0][0], gaps[-1][1])]
            else:
                extended = [(s, min(max(e, s + BLOCK), self.size)) for s, e in gaps]
            with self._lock:
                self.on_demand.extend(extended)
            try:
                self.fill(extended, gap=0)
            except BaseException as exc:
                self.error = exc
                raise

    def _walk_span(self, a: int, s: int, e: int) -> Span:
        """What a walk's read of ``[a, e)`` fetches (``s``: its first byte not held),
        the bytes before ``a`` let go: a walk reads forward, copying what it keeps."""
        with self._lock:
            i = bisect.bisect_right(self._ends, s)
            skipped = s - (self._ends[i - 1] if i else 0)
            if skipped < WALK_SKIP:
                self._span = n = min(max(2 * self._span, 2 * skipped), WALK_CAP)
            else:
                n = BLOCK
            i = bisect.bisect_right(self._ends, a)
            del self._starts[:i], self._ends[:i]
            if self._starts and self._starts[0] < a:
                self._starts[0] = a
            if self._map is not None:
                # Pages of a private anonymous mapping given back read as zeros again.
                top = a // mmap.PAGESIZE * mmap.PAGESIZE
                if top > self._let_go:
                    self._map.madvise(mmap.MADV_DONTNEED, self._let_go, top - self._let_go)
                    self._let_go = top
        return s, min(max(e, s + n), self.size)

    def at(self, offset: int, length: int) -> memoryview:
        """``length`` bytes at ``offset`` (fewer at the end of the file), those not held
        fetched now: what the NPY header parser reads through."""
        b = min(offset + length, self.size)
        self._on_demand(offset, b)
        return self._buf[offset:b].data

    # -- a file for zipfile and h5py (readinto; SeekableFile seeks) --------------------
    def readinto(self, buffer: Any) -> int:
        out = memoryview(buffer).cast("B")
        a = self._pos
        b = min(a + len(out), self.size)
        if b <= a:
            return 0
        if self.log is not None:
            self.log.append((a, b))
        self._on_demand(a, b)
        if self.ahead is not None:
            # What the reader will read next, known from these bytes (HDF5: an inner
            # node's children, which h5py reads one by one), fetched at once.
            children = self.ahead(self._buf[a:b], self.size)
            if children:
                try:
                    self.fill(children, gap=0)
                except BaseException as exc:
                    self.error = exc
                    raise
        out[: b - a] = self._buf[a:b].data
        self._pos = b
        return b - a


def _in_map(spans: list[Span], buf: NDArray[np.uint8]) -> None:
    """A mapped image's fetch, never called (its bytes are in the map: its fill counts)."""


class MappedImage(SparseImage):
    """A local file's image (or an object's, through its whole cache entry) through a
    read-only map of it (``file``, kept open while the image lives): every byte is
    there, nothing is fetched; :meth:`fill` counts the bytes a read asks (``nbytes``:
    the header and the rows, each time they are asked), which the decode copies from
    the map, from the page cache where their pages are
    (files are mapped only where the pages a read asks are: see
    :class:`~headrace.formats._npy_ranges.RangedNpy`).

    ``check(fd)`` raises unless the file is still the version listed (its size,
    device, inode and mtime). :meth:`want` calls it before the decode reads the map
    (a file shrunk under a map is SIGBUS at the read, where a ``pread`` returned
    short), and the decoder after (a rewrite in place during the read, as a
    ``pread``'s check after it catches), copying out what the decode left as views
    of the map (a batch must not hold a file's pages: its owner may truncate it).
    ``counted(n)`` (a cache entry's: :meth:`ObjectCache.hit`) is told the bytes each
    read asks, as they are asked. ``checked_a_visit``: its bytes are checked when the
    file is visited (a cache entry's blocks, by the visit that first reads them), so
    the image is not kept for the next read's rows.
    """

    def __init__(
        self,
        file: LocalFile,
        name: str,
        check: Callable[[int], None],
        size: int | None = None,
        counted: Callable[[int], None] | None = None,
        checked_a_visit: bool = False,
    ) -> None:
        # ``size``: the image's bytes, the file's first (a cache entry's: its checksum after).
        size = file.size if size is None else size
        view = np.frombuffer(file.mapped, np.uint8)[:size]
        super().__init__(size, _in_map, name, mapped=view)
        self.file = file
        self._check = check
        self._counted = counted
        self.checked_a_visit = checked_a_visit

    def check(self) -> None:
        self._check(self.file.fd)

    def fill(self, spans: list[Span], gap: int = MAX_GAP) -> None:  # noqa: ARG002
        """Count the bytes of ``spans`` (disjoint) read: the map holds them (``gap``:
        nothing is fetched, so nothing is joined)."""
        self._count(sum(b - a for a, b in spans))

    def _count(self, n: int) -> None:
        with self._lock:
            self.nbytes += n
        if self._counted is not None:
            self._counted(n)

    def want(self, rows: NDArray[np.int64]) -> None:
        self.check()
        if self.layout is not None:
            # Counted as arrays: recording each span as fetched images do cost more
            # than the copy of a 4 KB row.
            starts, ends = self.layout.span_arrays(rows)
            self._count(int((ends - starts).sum()))
