"""HDF5 on object storage (and, under shuffle="samples", local): fetch a file's metadata and
the chunks a read needs, not all of it.

A remote HDF5 file is held as a :class:`SparseImage`: an anonymous mapping of
the object's size (only the pages written cost memory) that h5py reads through
as a file. HDF5 decodes what it finds there, so every filter it can decode
works (gzip, lzf, shuffle, fletcher32, plugins) and the bytes are those of the
whole-object path. What is fetched:

* the file's metadata (superblock, object headers, chunk index): the first
  time a file is opened, on demand as h5py asks for it, and recorded; every
  later open fetches the recorded ranges up front, alongside the data, so a
  read of a file whose metadata is known is one batch of GETs in flight at once;
* the chunks holding the samples asked (from ``Dataset.id.chunk_iter``), or
  their rows of a contiguous dataset; a compact dataset lives in its header.

The GETs go through :class:`~headrace.formats._object_files.RemoteFile`: on
the source's request queue (at most ``in_flight``), through its object cache,
each checked against the listed size and ETag. A read h5py makes of bytes not
fetched (a variable-length string's heap, a virtual dataset's source) is
fetched then, on demand: slower, never wrong. A file the object cache holds whole
(kept by a source that read it whole) is read by the same ranges, from that entry.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from headrace.formats._hdf5 import _bad_index, _bad_key, _counted, _h5py
from headrace.formats._lazy_queue import LazyQueue
from headrace.formats._sparse import MAX_GAP, Span, SparseImage
from headrace.io._ranges import merge_ranges

if TYPE_CHECKING:
    from headrace.formats._file_list import FileList

__all__ = ["FileLayout", "RangedHdf5", "contiguous_rows", "learn_layout", "tree_children"]

#: The first read of a file not seen before: h5py writes the superblock and the
#: object headers first (one GET held every header of the files measured).
FIRST = 16 << 10
#: The metadata bytes a source keeps, of the files it read last: a file among them is
#: opened again with no GET for its metadata (about 50 KB a file of 400 chunks).
META_BYTES = 64 << 20
#: The layouts a source keeps (24 bytes a chunk, 16 a range), of the files read last: a
#: file past them learns its layout again (1-3 round trips). Kept all, a dataset of 10
#: million one-row chunks held 240 MB of them, growing with the dataset.
LAYOUT_BYTES = 64 << 20


@dataclass(slots=True)
class _Data:
    """Where one dataset's samples lie: chunks (by their first row), or rows of
    a contiguous block; ``None`` everywhere: compact (in the metadata) or unallocated."""

    rows_per_chunk: int = 0
    chunk_rows: NDArray[np.int64] | None = None  # each chunk's first row on axis 0
    chunk_at: NDArray[np.int64] | None = None
    chunk_size: NDArray[np.int64] | None = None
    offset: int | None = None  # contiguous: the block's offset, and bytes per row
    row_bytes: int = 0
    total: int = 0

    def spans(self, rows: NDArray[np.int64]) -> list[Span]:
        starts, ends = self.span_arrays(rows)
        return list(zip(starts.tolist(), ends.tolist(), strict=True))

    def span_arrays(self, rows: NDArray[np.int64]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """:meth:`spans` as arrays of starts and ends."""
        if self.chunk_rows is not None:
            assert self.chunk_at is not None and self.chunk_size is not None
            firsts = np.unique(rows // self.rows_per_chunk * self.rows_per_chunk)
            hit = np.isin(self.chunk_rows, firsts)
            at, size = self.chunk_at[hit], self.chunk_size[hit]
            return at, at + size
        if self.offset is None:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        if not self.row_bytes:  # a scalar, or no rows: the whole block
            return np.array([self.offset]), np.array([self.offset + self.total])
        starts = self.offset + np.unique(rows) * self.row_bytes
        return starts, starts + self.row_bytes


def contiguous_rows(offset: int, row_bytes: int, rows: int) -> _Data:
    """Where rows lie in a contiguous block: ``rows`` of ``row_bytes`` from ``offset``;
    ``row_bytes`` 0: a block of ``rows`` bytes, read whole for any row."""
    total = row_bytes * rows if row_bytes else rows
    return _Data(offset=offset, row_bytes=row_bytes, total=total)


@dataclass(slots=True)
class FileLayout:
    """What one file's first open learned: the metadata ranges it read, and where
    each dataset's samples lie (``None``: not known; its reads are made on demand)."""

    metadata: list[Span]
    data: dict[str, _Data | None] = field(default_factory=dict)

    def spans(self, rows: NDArray[np.int64]) -> list[Span]:
        """The byte ranges holding samples ``rows`` of every dataset."""
        out: list[Span] = []
        for d in self.data.values():
            if d is not None:
                out.extend(d.spans(rows))
        return out

    def span_arrays(self, rows: NDArray[np.int64]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """The metadata ranges and :meth:`spans`, as arrays of starts and ends."""
        parts = [d.span_arrays(rows) for d in self.data.values() if d is not None]
        meta = np.array(self.metadata, np.int64).reshape(-1, 2)
        starts = np.concatenate([meta[:, 0], *(a for a, _ in parts)])
        return starts, np.concatenate([meta[:, 1], *(b for _, b in parts)])

    @property
    def nbytes(self) -> int:
        """About what this layout holds in memory (its arrays and ranges)."""
        n = 16 * len(self.metadata)
        for d in self.data.values():
            if d is not None:
                arrays = (d.chunk_rows, d.chunk_at, d.chunk_size)
                n += sum(a.nbytes for a in arrays if a is not None)
        return n

    def known(self, a: int, b: int) -> bool:
        """Whether ``[a, b)`` lies in a dataset's data (a read there is not metadata)."""
        for d in self.data.values():
            if d is None:
                continue
            if d.offset is not None and d.offset <= a and b <= d.offset + d.total:
                return True
            if d.chunk_at is not None and d.chunk_size is not None and len(d.chunk_at):
                i = int(np.searchsorted(d.chunk_at, a, side="right")) - 1
                if i >= 0 and a < int(d.chunk_at[i] + d.chunk_size[i]):
                    return True
        return False


def tree_children(node: NDArray[np.uint8], size: int) -> list[Span]:
    """The children of ``node`` where it is an inner node of a version-1 B-tree of
    chunks (HDF5's default chunk index), read whole; else ``[]``.

    The node: ``TREE``, type 1, level, entries used (u16), two sibling addresses,
    then keys and child addresses alternating; a key is a chunk size (u32), a filter
    mask (u32) and ``d`` offsets (u64), ``d`` the dataset's rank + 1. HDF5 reads a
    node whole, so the read's length fixes ``d`` (the node holds ``2K + 1`` keys and
    ``2K`` children); children of an inner node are nodes of that length. Only a
    guess that parses cleanly (every child inside the object) is used: a wrong one
    would fetch bytes HDF5 never reads, not change any.
    """
    n = len(node)
    if n < 24 or bytes(node[:5]) != b"TREE\x01" or node[5] == 0:
        return []
    used = int(node[6]) | int(node[7]) << 8
    if used == 0:
        return []
    raw = node.tobytes()
    for d in range(2, 34):
        key = 8 + 8 * d
        slots, rest = divmod(n - 24 - key, key + 8)
        if rest or slots % 2 or slots < used:  # 2K children, K >= 1
            continue
        at = [24 + key + i * (key + 8) for i in range(used)]
        kids = [int.from_bytes(raw[i : i + 8], "little") for i in at]
        if all(0 < k and k + n <= size for k in kids):
            return [(k, k + n) for k in kids]
    return []


@_counted
def learn_layout(image: SparseImage, datasets: tuple[str, ...] | list[str]) -> FileLayout:
    """Open the file in ``image`` (fetching its metadata on demand) and note where each
    of ``datasets`` keeps its samples and which ranges the metadata took.

    Reads on demand are round trips made inside h5py, which holds one lock for
    every call: each one stalls every other thread's HDF5 work too. Walking a
    version-1 chunk B-tree was one per node (14 for 660 chunks); the image fetches
    the children of an inner node together when it is read (:func:`tree_children`).

    Every chunk's location is read here (``chunk_iter`` walks the whole chunk index),
    so the index nodes a later read passes through are among the recorded ranges.
    A dataset that cannot be placed (missing, virtual, an error) is ``None``: its
    reads are made on demand, and decoding names what is wrong with it.
    """
    h5py = _h5py()
    image.fill([(0, FIRST)], gap=0)
    data: dict[str, _Data | None] = {}
    image.log = []
    image.ahead = tree_children
    try:
        try:
            f = h5py.File(image, "r")
        except OSError as exc:
            if image.error is not None:
                raise image.error from exc
            # Not HDF5, or damaged: decoding it says so, naming the file.
            return FileLayout(metadata=[(0, min(FIRST, image.size))])
        with f:
            for ds in datasets:
                try:
                    data[ds] = _place(f.get(ds), h5py, image, ds)
                except (OSError, ValueError, TypeError, KeyError, RuntimeError) as exc:
                    if image.error is not None:
                        raise image.error from exc
                    data[ds] = None
        reads = image.log
    finally:
        image.log = None
        image.ahead = None
    layout = FileLayout(metadata=[], data=data)
    # What HDF5 read, not what was fetched: the hint's misses are left out.
    spans = [(0, min(FIRST, image.size)), *reads]
    layout.metadata = merge_ranges([s for s in spans if not layout.known(*s)])
    return layout


def _place(obj: Any, h5py: Any, image: SparseImage, name: str) -> _Data | None:
    """Where dataset ``name``'s samples lie in ``image``; a chunk index key that cannot be
    one of the dataset's chunks is refused (see :func:`_bad_key`)."""
    if not isinstance(obj, h5py.Dataset) or obj.shape is None:
        return None
    plist = obj.id.get_create_plist()
    layout = plist.get_layout()
    if layout == h5py.h5d.COMPACT:
        return _Data()
    if layout == h5py.h5d.CONTIGUOUS:
        offset = obj.id.get_offset()
        total = int(obj.id.get_storage_size())
        n = int(obj.shape[0]) if obj.ndim else 0
        if offset is None or not total:
            return _Data()
        row = total // n if n and total % n == 0 else 0
        return _Data(offset=int(offset), row_bytes=row, total=total)
    if layout == h5py.h5d.CHUNKED and obj.chunks and obj.ndim:
        first: list[int] = []
        at: list[int] = []
        size: list[int] = []
        bad: list[str] = []
        shape, chunks = tuple(obj.shape), tuple(obj.chunks)
        filters = plist.get_nfilters()
        # A chunk stored as is holds the chunk's values (variable-length ones: heap ids).
        raw = None if obj.dtype.kind == "O" else math.prod(chunks) * obj.id.get_type().get_size()

        def note(info: Any) -> None:
            if not bad and (why := _bad_key(info, shape, chunks, image.size, filters, raw)):
                bad.append(why)
            first.append(info.chunk_offset[0])
            at.append(info.byte_offset)
            size.append(info.size)

        obj.id.chunk_iter(note)
        if bad:
            raise _bad_index(image.name, name, bad[0])
        order = np.argsort(np.asarray(at, dtype=np.int64), kind="stable")
        return _Data(
            rows_per_chunk=int(obj.chunks[0]),
            chunk_rows=np.asarray(first, dtype=np.int64)[order],
            chunk_at=np.asarray(at, dtype=np.int64)[order],
            chunk_size=np.asarray(size, dtype=np.int64)[order],
        )
    return None


class RangedHdf5:
    """Sparse images of one source's remote HDF5 files, fetched by ranges.

    ``files()``: the source's current listing (a reopened source has a new store).
    Each file's layout is learned at its first fetch and kept (a few ranges and
    three integers a chunk, ``LAYOUT_BYTES`` in all, of the files read last), so that
    later fetches need no round trip before the data; its metadata bytes too, for
    the files read last (``META_BYTES`` in all): a file among them costs only the
    GETs of its chunks.
    """

    def __init__(
        self,
        files: Callable[[], FileList],
        datasets: tuple[str, ...],
        in_flight: int,
        above: int,
    ) -> None:
        self._files = files
        self._datasets = datasets
        self.above = above
        # Layouts by file, least recently used first, within LAYOUT_BYTES.
        self._layouts: OrderedDict[int, FileLayout] = OrderedDict()
        self._layout_bytes = 0
        # Metadata bytes by file, least recently used first, within META_BYTES.
        self._meta: OrderedDict[int, list[tuple[int, bytes]]] = OrderedDict()
        self._meta_bytes = 0
        self._lock = threading.Lock()
        self._queue = LazyQueue(in_flight, "headrace-hdf5-ranges")

    def applies(self, f: int) -> bool:
        """Whether file ``f`` is read by ranges: large enough."""
        return self._files().sizes[f] >= self.above

    def image(self, f: int, rows: NDArray[np.int64] | None) -> SparseImage:
        """File ``f``'s metadata and the chunks of samples ``rows`` (``None``: metadata
        only; :meth:`SparseImage.want` fetches the rest)."""
        files = self._files()
        # A file the cache holds whole (kept by a source that read it whole) is read by
        # the same ranges from it: read whole, 64 files of 1 GiB held at once were 64 GiB,
        # past the default in_flight's cap, which leaves files read by ranges out.
        # With cache_dir, entries are the 64 KiB blocks the spans touch, as for NPY rows:
        # entries named by the spans one read joined (chunks and metadata together)
        # differ with the samples that share a read, so a later pass missed most of them.
        if files.remote:
            fetch = files.fetch_ranges(f, self._queue.get(), cache_block=MAX_GAP)
        else:  # a local file (shuffle="samples"): a pread a span, checked as listed
            fetch = files.local_ranges(f)
        image = SparseImage(files.sizes[f], fetch, files.name(f))
        with self._lock:
            layout = self._layouts.get(f)
            if layout is not None:
                self._layouts.move_to_end(f)
            meta = self._meta.get(f)
            if meta is not None:
                self._meta.move_to_end(f)
        if layout is None:
            layout = learn_layout(image, self._datasets)
            self._keep_layout(f, layout)
        elif meta is not None:
            image.put(meta)
        image.layout = layout
        if rows is None:
            image.fill(layout.metadata)
        else:
            image.want(rows)
        if meta is None:
            self._keep(f, image.take(layout.metadata))
        return image

    def _keep_layout(self, f: int, layout: FileLayout) -> None:
        with self._lock:
            if f in self._layouts:  # learned by another thread meanwhile
                return
            self._layouts[f] = layout
            self._layout_bytes += layout.nbytes
            while self._layout_bytes > LAYOUT_BYTES and len(self._layouts) > 1:
                _, old = self._layouts.popitem(last=False)
                self._layout_bytes -= old.nbytes

    def _keep(self, f: int, meta: list[tuple[int, bytes]]) -> None:
        n = sum(len(b) for _, b in meta)
        with self._lock:
            if f in self._meta or n > META_BYTES:
                return
            self._meta[f] = meta
            self._meta_bytes += n
            while self._meta_bytes > META_BYTES:
                _, old = self._meta.popitem(last=False)
                self._meta_bytes -= sum(len(b) for _, b in old)

    def slot(self) -> AbstractContextManager[None]:
        """A place among the ranges' GETs in flight, for a file fetched whole."""
        return self._queue.get().slot()

    def close(self) -> None:
        """Close the request queue (the layouts are kept: the files are the ones listed)."""
        self._queue.close()
