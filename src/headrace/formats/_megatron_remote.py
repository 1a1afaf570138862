"""A Megatron ``.idx`` on object storage, checked as a local one is and not kept.

Read whole, a 50M-document index was a 1 GB GET before the first batch, then 1 GB
held by the source and pickled to each worker. It is now checked :data:`PIECE`
entries at a time by the local check (:func:`~headrace.formats._megatron.check_index`):
a GET of its first 8 MiB (the header, and a small index whole: one request, as
before), then ranged GETs of its pieces, the next pieces' in flight while one is
checked (``AHEAD``), each GET checked against the size and ETag of the first. What
is kept is a :class:`CheckedIndex`: counts and a stamp, the object's size and ETag.

Document bounds (``positions="documents"``) read the pointers and document entries
again, after a HEAD: an object replaced since (another size, or another ETag where
both have one) is a :class:`~headrace.errors.FormatError` saying to reopen the source.
An object served without an ETag (a plain HTTP server may send none) is checked by
its size alone, as its token reads are.

With ``cache_dir``, that an object (its URL, size and strong ETag) was checked
against a ``.bin`` of a size is kept as a cache entry of the header's bytes: a
restart reads the header and that entry, not the index.
"""

from __future__ import annotations

import hashlib
import threading
from collections import deque
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
from headrace.formats._object_files import ObjectFiles, RemoteFile, wait_all

if TYPE_CHECKING:
    from headrace.io import ObjectCache, ObjectInfo

__all__ = ["AHEAD", "CHECKS", "remote_document_bounds", "remote_index"]

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
    assert len(index.stamp) == 2  # an object's: its size and ETag
    size, etag = index.stamp
    info = files.info(index.path)
    if info.size != size or (etag and info.etag and info.etag != etag):
        raise changed_since(index.path, "size, ETag", (info.size, info.etag), index.stamp)
    # Each GET is checked against the stamp too: replaced in between, it is refused.
    return index.document_bounds(_reads(files.open(index.path, size, etag)))


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
