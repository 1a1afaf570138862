"""A local Megatron index's document starts, looked up through a map of the ``.idx``.

``positions="documents"`` needs, for each row of a batch, the documents that start
inside it. Made as an array (:meth:`CheckedIndex.document_bounds`), the starts of an
index of 50M documents were 400 MB held in every process that read one (each
DataLoader worker its own) and 1.6 GB at the peak of making them (the pointers, the
document entries and three temporaries as large). Here the pointers and document
entries stay in the page cache, shared by every process, read through a read-only
map: a batch's rows are found by a search in a sample of every :data:`STEP`-th entry
(held: 16 bytes a :data:`STEP` documents) and then in one block of the map per row;
the starts those rows need are gathered from it. The results are those of the array,
``np.searchsorted`` and indexing (the tests compare them).

The arrays of an ``.idx`` lie at offsets that are not multiples of 8 (its header is
34 bytes), and ``np.searchsorted`` copies an unaligned array whole before searching
it: hence the sample and the gathers, which read in place.

A file whose pages the storage may fail to read through a map (a network or FUSE
mount: ``SIGBUS``), or that cannot be mapped, is read as the array, as before.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import weakref
from collections.abc import Callable, Iterable
from functools import cache
from typing import Any, Literal, Protocol

import numpy as np
from numpy.typing import NDArray

from headrace.errors import ConfigError, StorageError
from headrace.formats._megatron import (
    INDEX_HEAD,
    CheckedIndex,
    changed_since,
    open_again,
    stamp_of,
)
from headrace.io import LocalFile
from headrace.io._buffers import read_randomly

__all__ = ["STEP", "Entries", "MappedStarts", "mapped_starts", "take_sample"]

#: Entries of the map between two of the sample held: each lookup reads one block of
#: ``STEP`` entries a row (512 bytes), and the samples cost 16 bytes a ``STEP``
#: documents (50M documents: 12.5 MB, not 400). 256 held 4 times less and made a batch
#: of 64 rows' lookups about twice as slow (2c, 2026-12-04, under load).
STEP = 64


def mapped_starts(index: CheckedIndex) -> MappedStarts | None:
    """The starts of a local index's documents, through a map of it (``None``: the file
    lies on a network or FUSE mount, or cannot be mapped: read it as the array). One
    changed since it was checked is refused (as :meth:`CheckedIndex.document_bounds`)."""
    with open_again(index.path) as f:
        now = stamp_of(f)
        if now != index.stamp:
            raise changed_since(index.path, "device, inode, size, mtime", now, index.stamp)
        if f.network:
            return None
        whole = _map_whole(f)
        if whole is None:  # a filesystem that maps nothing (ENODEV)
            return None
        at = INDEX_HEAD + 4 * index.sequences
        pointers = _sample(f, at, index.sequences)
        docs = _sample(f, at + 8 * index.sequences, index.entries - 1)  # the last is S
    # Closed, the file leaves its map alive while arrays view it: it is unmapped when
    # these are dropped, and no descriptor is held meanwhile (see _map_whole).
    at = INDEX_HEAD + 4 * index.sequences
    n_seq, n_doc = index.sequences, index.entries
    return MappedStarts(
        index,
        whole[at : at + 8 * n_seq].view(np.int64),
        whole[at + 8 * n_seq : at + 8 * (n_seq + n_doc - 1)].view(np.int64),
        pointers,
        docs,
        lambda: _check_local(index),
    )


def _map_whole(f: LocalFile) -> NDArray[np.uint8] | None:
    """A read-only map of the whole of ``f`` that keeps no descriptor, unmapped when the
    last array over it is dropped (``None``: its filesystem maps nothing, ENODEV).

    Python's ``mmap`` keeps a duplicate of the descriptor it maps as long as the map
    lives, and a source keeps each file's starts until it closes: 2,000 Megatron shards
    read with positions held 2,000 descriptors (outside the bound on token sources'
    files, :mod:`._token_budget`) until 2026-12-07, and failed with EMFILE past ``ulimit
    -n``. libc's ``mmap`` keeps none; where it cannot be called, Python's is used.
    """
    calls = _libc_mmap()
    if calls is None:
        try:
            return np.frombuffer(f.mapped, dtype=np.uint8)
        except ConfigError:
            return None
    mmap_, munmap = calls
    address = mmap_(None, f.size, mmap.PROT_READ, mmap.MAP_SHARED, f.fd, 0)
    if address is None or address == _MAP_FAILED:
        code = ctypes.get_errno()
        if code == errno.ENODEV:
            return None
        raise StorageError(code, f"{f.path}: cannot memory-map the index ({os.strerror(code)})")
    # As LocalFile.mapped: a lookup's fault reads its page, not the read-around about it.
    read_randomly(address, f.size)
    whole: NDArray[np.uint8] = np.asarray(_Mapping(address, f.size, munmap))
    return whole


class _Mapping:
    """Bytes mapped by libc's ``mmap``, seen by NumPy through the array interface (each
    array over them keeps this alive) and unmapped when collected."""

    def __init__(self, address: int, size: int, munmap: Any) -> None:
        self.__array_interface__ = {
            "data": (address, True),  # read-only
            "shape": (size,),
            "typestr": "|u1",
            "version": 3,
        }
        weakref.finalize(self, munmap, address, size)


_MAP_FAILED = ctypes.c_void_p(-1).value


@cache
def _libc_mmap() -> tuple[Any, Any] | None:
    """libc's ``mmap`` and ``munmap`` through ctypes (``None`` where there are none)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        mmap_, munmap = libc.mmap, libc.munmap
    except (OSError, AttributeError):
        return None
    mmap_.argtypes = [
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_long,  # off_t of the mmap symbol (0 is passed)
    ]
    mmap_.restype = ctypes.c_void_p
    munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    munmap.restype = ctypes.c_int
    return mmap_, munmap


def _sample(f: LocalFile, at: int, n: int) -> NDArray[np.int64]:
    """Every :data:`STEP`-th of the ``n`` int64 entries at ``at``, read by ``pread`` a
    piece at a time: taken through the map, every page would be mapped into this
    process (the RSS of a 50M-document index's sample: +800 MB of page cache)."""
    pieces = (
        f.pread(at + 8 * lo, 8 * min(_PIECE, n - lo)).view(np.int64) for lo in range(0, n, _PIECE)
    )
    return take_sample(pieces, n)


#: Entries read at a time for a sample (1 MiB): a multiple of :data:`STEP`.
_PIECE = 1 << 17


class Entries(Protocol):
    """int64 entries of an index read where asked: a map's view, or an object's blocks."""

    def __len__(self) -> int: ...

    def __getitem__(self, i: NDArray[np.int64]) -> NDArray[np.int64]: ...


class MappedStarts:
    """Token offsets where each document of a Megatron index starts (its ``D - 1``
    documents: :meth:`CheckedIndex.document_bounds` without the total), found and read
    in the index's pointers and document entries where they lie (a map of a local
    index, or an object's blocks: :mod:`~headrace.formats._megatron_remote`).
    ``search`` is ``np.searchsorted`` of those offsets and ``take`` their indexing."""

    __slots__ = (
        "_check",
        "_docs",
        "_docs_sample",
        "_index",
        "_pointers",
        "_pointers_sample",
        "mapped",
    )

    def __init__(
        self,
        index: CheckedIndex,
        pointers: Entries,
        docs: Entries,
        pointers_sample: NDArray[np.int64],
        docs_sample: NDArray[np.int64],
        check: Callable[[], None],
        mapped: bool = True,
    ) -> None:
        """``pointers`` and ``docs``: the index's pointers and document entries (not the
        last, ``S``); the samples: every :data:`STEP`-th of each; ``check``: refuses an
        index changed since it was checked, before each lookup."""
        #: read through a map of a local file (let go when the source closes; an object's
        #: are kept, their samples read once)
        self.mapped = mapped
        self._index = index
        self._pointers = pointers
        self._docs = docs
        self._pointers_sample = pointers_sample
        self._docs_sample = docs_sample
        self._check = check

    def __len__(self) -> int:
        return len(self._docs)

    @property
    def nbytes(self) -> int:
        """What is held in memory (the map's pages are the page cache's)."""
        return int(self._pointers_sample.nbytes + self._docs_sample.nbytes)

    def search(
        self, tokens: NDArray[np.int64], side: Literal["left", "right"]
    ) -> NDArray[np.int64]:
        """``np.searchsorted(starts, tokens, side)``."""
        self._check()
        index = self._index
        at = np.asarray(tokens, dtype=np.int64) * index.dtype.itemsize
        # Sequence i starts at pointers[i] bytes, and the end of the tokens (bin_size)
        # after the last: both non-decreasing, so the sequences starting at or before
        # (before) ``at`` are a prefix, and so are the documents starting in them.
        before = np.less_equal if side == "right" else np.less
        seqs = _count(self._pointers, self._pointers_sample, at, before)
        seqs += before(index.bin_size, at)
        return _count(self._docs, self._docs_sample, seqs, np.less)

    def take(self, i: NDArray[np.int64]) -> NDArray[np.int64]:
        """``starts[i]`` (``i`` within ``[0, len)``)."""
        self._check()
        index = self._index
        seqs = self._docs[i]
        last = len(self._pointers) - 1
        inside = seqs <= last  # an empty last document starts at the end of the tokens
        at = self._pointers[np.clip(seqs, 0, max(last, 0))] if last >= 0 else seqs
        byte = np.where(inside, at, np.int64(index.bin_size))
        out: NDArray[np.int64] = byte // index.dtype.itemsize
        return out


def _check_local(index: CheckedIndex) -> None:
    """Refuse an index changed since it was checked: a file cut short under its map is
    ``SIGBUS`` (the process killed without a word) at the next page read."""
    try:
        st = os.stat(index.path)
    except OSError as exc:
        raise changed_since(index.path, "stat", repr(exc), index.stamp) from exc
    now = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    if now != index.stamp:
        raise changed_since(index.path, "device, inode, size, mtime", now, index.stamp)


def take_sample(pieces: Iterable[NDArray[np.int64]], n: int) -> NDArray[np.int64]:
    """Every :data:`STEP`-th of ``n`` entries given in ``pieces`` of whole multiples of
    :data:`STEP` entries (the last may be shorter)."""
    out = np.empty(-(-n // STEP), dtype=np.int64)
    at = 0
    for piece in pieces:
        k = -(-len(piece) // STEP)
        out[at : at + k] = piece[::STEP]
        at += k
    return out


def _count(
    entries: Entries, sample: NDArray[np.int64], values: NDArray[np.int64], before: Any
) -> NDArray[np.int64]:
    """For each value, how many of the non-decreasing ``entries`` are ``before`` it (a
    prefix): ``np.searchsorted`` without a copy of ``entries``. ``sample``: every
    :data:`STEP`-th entry."""
    n = len(entries)
    values = np.asarray(values, dtype=np.int64)
    if n == 0:
        return np.zeros(values.shape, dtype=np.int64)
    # Sampled entries j * STEP before a value: its prefix ends after (c - 1) * STEP,
    # and at c * STEP at the latest; the entries between are read from the map.
    c = np.searchsorted(sample, values, side="right" if before is np.less_equal else "left")
    c = c.astype(np.int64)
    lo = np.maximum(c - 1, 0) * STEP + 1
    hi = np.minimum(c * STEP, n)
    block = lo[:, None] + np.arange(STEP - 1, dtype=np.int64)
    read = entries[np.minimum(block, n - 1)]
    held = (before(read, values[:, None]) & (block < hi[:, None])).sum(axis=1)
    out: NDArray[np.int64] = np.where(c > 0, lo + held, 0)
    return out
