"""A Megatron ``.idx`` on object storage, checked as a local one is and not kept.

Read whole, a 50M-document index was a 1 GB GET before the first batch, then 1 GB
held by the source and pickled to each worker. It is now checked :data:`PIECE`
entries at a time by the local check (:func:`~headrace.formats._megatron.check_index`):
a GET of its first 8 MiB (the header, and a small index whole: one request, as
before), then ranged GETs of its pieces, the next pieces' in flight while one is
checked (``AHEAD``), each GET checked against the size and ETag of the first. What
is kept is a :class:`CheckedIndex`: counts and a stamp, the object's size and ETag.

Document starts (``positions="documents"``) read the pointers and document entries
again, after a HEAD: an object replaced since (another size, or another ETag where
both have one) is a :class:`~headrace.errors.FormatError` saying to reopen the source.
An object served without an ETag (a plain HTTP server may send none) is checked by
its size alone, as its token reads are. They are looked up as a local index's are
(:func:`remote_starts`): a sample of each array read once, then blocks fetched where a
window's rows need them, about two windows' kept; where those would hold more than
half the array of every start (a window spanning much of the index), that array is
made instead (:func:`remote_document_bounds`).

With ``cache_dir``, that an object (its URL, size and strong ETag) was checked
against a ``.bin`` of a size is kept as a cache entry of the header's bytes: a
restart reads the header and that entry, not the index.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict, deque
from collections.abc import Generator, Sequence
from concurrent.futures import Future, wait
from contextlib import nullcontext
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from headrace.errors import ObjectNotFoundError
from headrace.formats import _object_files
from headrace.formats._megatron import (
    INDEX_HEAD,
    CheckedIndex,
    Reads,
    changed_since,
    check_index,
    header_index,
)
from headrace.formats._megatron_starts import STEP, MappedStarts, take_sample
from headrace.formats._object_files import ObjectFiles, RemoteFile, wait_all
from headrace.io._open_files import gone_error

if TYPE_CHECKING:
    from headrace.io import ObjectCache, ObjectInfo

__all__ = [
    "AHEAD",
    "BLOCK",
    "CHECKS",
    "KEEP",
    "remote_document_bounds",
    "remote_index",
    "remote_starts",
]

#: Ranges of an index read ahead of the one being checked. Each is one piece's lengths,
#: pointers or document entries (64 MB at most); a piece's lengths and pointers are checked
#: together, so at most ``AHEAD + 3`` ranges are held at once, whatever the index's size.
AHEAD = 2

#: Indexes larger than their first GET checked at once in a process: a source opens 16
#: files at a time, and 16 checks of 50M-document indexes held 16 x 5 ranges of 64 MB
#: (5 GB); two hold 640 MB. Smaller indexes (read whole by the first GET) are not held back.
CHECKS = threading.BoundedSemaphore(2)


def remote_index(files: ObjectFiles, url: str, bin_size: int) -> CheckedIndex | None:
    """The Megatron index at ``url`` checked against a ``.bin`` of ``bin_size`` bytes
    (``None``: there is none), read in pieces (see the module doc)."""
    try:
        head, info = files.read_start(url, _object_files.PIECE)  # the GET a read starts with
    except ObjectNotFoundError:
        return None
    stamp = (info.size, info.etag)
    kept = _kept(files, url, info, bin_size)
    if kept is not None:
        cache, name = kept
        found = cache.read(name, INDEX_HEAD, "v1")
        if found is not None and found.tobytes() == bytes(head[:INDEX_HEAD]):
            return header_index(url, head, info.size, bin_size, stamp)
    first = np.frombuffer(head, np.uint8)
    reads = _reads(files.open(url, *stamp, cached=False), first)
    with CHECKS if info.size > first.size else nullcontext():  # not read whole by the first GET
        index = check_index(url, head, info.size, bin_size, reads, stamp)
    if kept is not None:
        kept[0].write(kept[1], INDEX_HEAD, "v1", first[:INDEX_HEAD])
    return index


def remote_document_bounds(files: ObjectFiles, index: CheckedIndex) -> NDArray[np.int64]:
    """:meth:`CheckedIndex.document_bounds` of an index on object storage, refused
    (:class:`~headrace.errors.FormatError`) if the object is not the one checked."""
    size, etag = _unchanged(files, index)
    # Each GET is checked against the stamp too: replaced in between, it is refused.
    return index.document_bounds(_reads(files.open(index.path, size, etag)))


def _unchanged(files: ObjectFiles, index: CheckedIndex) -> tuple[int, str | None]:
    """The index object's size and ETag as checked, after a HEAD found it unchanged."""
    assert len(index.stamp) == 2  # an object's: its size and ETag
    size, etag = index.stamp
    try:
        info = files.info(index.path)
    except ObjectNotFoundError as exc:
        if ": no such object (" not in str(exc):
            raise  # its bucket (container) is gone: said as such
        raise gone_error(index.path, "token source", noun="object") from exc
    if info.size != size or (etag and info.etag and info.etag != etag):
        raise changed_since(index.path, "size, ETag", (info.size, info.etag), index.stamp)
    return size, etag


def remote_starts(
    files: ObjectFiles, index: CheckedIndex, window_tokens: int
) -> MappedStarts | None:
    """The document starts of an index on object storage, looked up as a local index's
    are (:class:`~headrace.formats._megatron_starts.MappedStarts`): the samples read once
    (every :data:`~headrace.formats._megatron_starts.STEP`-th pointer and document
    entry, the object read through in ranges of 8 MiB, a few in flight), then blocks of
    :data:`BLOCK` entries fetched where lookups need them, those of about two windows of
    ``window_tokens`` (at least :data:`KEEP`) kept for each array. Held: 16 bytes a
    ``STEP`` documents and the blocks kept, not the array of every start (50M
    documents: 400 MB in each process, 800 MB at its peak). ``None`` where the blocks
    kept would hold more than half that array (a window spanning much of the index):
    then the array is made (:func:`remote_document_bounds`)."""
    n_seq, n_doc = index.sequences, index.entries - 1  # the last document entry is S
    tokens = index.bin_size // index.dtype.itemsize

    def kept(n: int) -> int:
        """Blocks of an array of ``n`` entries kept: twice those a window's entries span."""
        per_window = -(-n * min(window_tokens, tokens) // max(tokens, 1))
        return max(KEEP, 2 * (-(-per_window // BLOCK) + 1))

    keep = (kept(n_seq), kept(n_doc))
    if 8 * BLOCK * sum(keep) > 4 * n_doc:
        return None
    size, etag = _unchanged(files, index)
    f = files.open(index.path, size, etag, cached=False)
    at = INDEX_HEAD + 4 * n_seq

    def sample(at: int, n: int) -> NDArray[np.int64]:
        step = _object_files.PIECE // 8 // STEP * STEP or STEP  # entries a GET: 8 MiB
        ranges = [(at + 8 * lo, 8 * min(step, n - lo)) for lo in range(0, n, step)]
        return take_sample((b.view(np.int64) for b in _ranges_ahead(f, ranges, None)), n)

    pointers, docs = sample(at, n_seq), sample(at + 8 * n_seq, n_doc)
    return MappedStarts(
        index,
        _Blocks(files, index.path, (size, etag), at, n_seq, keep[0]),
        _Blocks(files, index.path, (size, etag), at + 8 * n_seq, n_doc, keep[1]),
        pointers,
        docs,
        lambda: None,  # each GET is checked against the object's size and ETag
        mapped=False,
    )


#: Entries of a remote index's array fetched at once where a lookup needs them (512
#: KiB): a window's rows look up documents close together, in the blocks it spans.
BLOCK = 1 << 16
#: Blocks of each array kept at least (8 MiB).
KEEP = 16


class _Blocks:
    """The ``n`` int64 entries at byte ``at`` of an index's object, fetched :data:`BLOCK`
    at a time where they are read (through the object cache, where there is one), the
    ``keep`` last used kept."""

    def __init__(
        self,
        files: ObjectFiles,
        url: str,
        stamp: tuple[int, str | None],
        at: int,
        n: int,
        keep: int,
    ) -> None:
        self._keep = keep
        self._files = files  # a source's: reopened after it closes
        self._url = url
        self._stamp = stamp  # the size and ETag each GET is checked against
        self._at = at
        self._n = n
        self._kept: OrderedDict[int, NDArray[np.int64]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: NDArray[np.int64]) -> NDArray[np.int64]:
        i = np.asarray(i, dtype=np.int64)
        flat = i.reshape(-1)
        if flat.size and (int(flat.min()) < 0 or int(flat.max()) >= self._n):
            # A lookup's bug, not the object's: it named neither the object nor the array.
            raise IndexError(
                f"{self._url}: index entries [{int(flat.min())}, {int(flat.max())}] looked "
                f"up, of {self._n} (the int64 array at byte {self._at}): a document "
                "lookup past the index checked at open; please report it"
            )
        blocks = flat // BLOCK
        need = np.unique(blocks).tolist()
        with self._lock:
            missing = [b for b in need if b not in self._kept]
            if missing and need[-1] - need[0] < self._keep // 2:
                # The blocks between too (a window's rows: the rest of its span, which
                # the next batches look up), all in one round of GETs, not one a batch.
                missing = [b for b in range(need[0], need[-1] + 1) if b not in self._kept]
            if missing:
                self._fetch(missing)
            got = []
            for b in need:
                self._kept.move_to_end(b)
                got.append(self._kept[b])
            while len(self._kept) > max(self._keep, len(need)):
                self._kept.popitem(last=False)
        out = np.empty(flat.shape, dtype=np.int64)
        for b, entries in zip(need, got, strict=True):
            sel = blocks == b
            out[sel] = entries[flat[sel] - b * BLOCK]
        return out.reshape(i.shape)

    def _fetch(self, missing: list[int]) -> None:
        f = self._files.open(self._url, *self._stamp)
        bufs = {b: np.empty(min(BLOCK, self._n - b * BLOCK), np.int64) for b in missing}
        futures = [
            r
            for b, buf in bufs.items()
            for r in f.read_pieces(buf.view(np.uint8), self._at + 8 * b * BLOCK)
        ]
        wait_all(futures)
        for r in futures:
            r.result()
        self._kept.update(bufs)


def _reads(f: RemoteFile, first: NDArray[np.uint8] | None = None) -> Reads:
    return lambda ranges: _ranges_ahead(f, ranges, first)


def _ranges_ahead(
    f: RemoteFile, ranges: Sequence[tuple[int, int]], first: NDArray[np.uint8] | None
) -> Generator[NDArray[np.uint8], None, None]:
    """Each range's bytes in order: from ``first`` (the object's first bytes) where it
    holds them, else by ranged GETs of at most 8 MiB, the next ``AHEAD`` ranges' in
    flight meanwhile. Left early (a check failed), the GETs started finish first: none
    writes into a buffer after."""
    started: deque[tuple[NDArray[np.uint8], list[Future[None]]]] = deque()

    def start(i: int) -> None:
        offset, length = ranges[i]
        if first is not None and offset + length <= first.size:
            started.append((first[offset : offset + length], []))
            return
        buf = np.empty(length, np.uint8)
        started.append((buf, f.read_pieces(buf, offset)))

    try:
        for i in range(min(AHEAD + 1, len(ranges))):
            start(i)
        for i in range(len(ranges)):
            buf, reads = started.popleft()
            wait_all(reads)
            if i + AHEAD + 1 < len(ranges):
                start(i + AHEAD + 1)
            yield buf
    finally:
        wait([r for _, reads in started for r in reads])


def _kept(
    files: ObjectFiles, url: str, info: ObjectInfo, bin_size: int
) -> tuple[ObjectCache, str] | None:
    """Where the object cache keeps that this version of the index was checked against a
    ``.bin`` of ``bin_size`` bytes, or ``None`` (no cache; no strong ETag: an object whose
    bytes could change unseen is checked every time)."""
    etag = info.etag
    if files.cache is None or etag is None or etag.startswith("W/"):
        return None
    key = f"{files.cache_key(url)}\0{info.size}\0{etag}\0{bin_size}"
    return files.cache, f"headrace-megatron-checked:{hashlib.sha256(key.encode()).hexdigest()}"
