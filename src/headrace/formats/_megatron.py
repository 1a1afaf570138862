"""Megatron-LM indexed datasets: a ``.bin`` of tokens and an ``.idx`` that describes it.

Layout of ``.idx`` (little-endian, as written by Megatron-LM's
``IndexedDatasetBuilder``)::

    9 bytes   magic b"MMIDIDX\\x00\\x00"
    u64       version (1)
    u8        dtype code (1 u8, 2 i8, 3 i16, 4 i32, 5 i64, 6 f64, 7 f32, 8 u16)
    u64       sequence count S
    u64       document count D  (entries in document_indices; D - 1 documents)
    i32[S]    sequence lengths, in tokens
    i64[S]    sequence pointers, byte offsets into ``.bin``
    i64[D]    document indices: sequence index where each document starts, then S
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Generator, Iterable, Sequence
from contextlib import closing
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from headrace.errors import ConfigError, FormatError, ObjectNotFoundError
from headrace.io import LocalFile
from headrace.io._open_files import gone_error

__all__ = [
    "INDEX_HEAD",
    "MEGATRON_MAGIC",
    "PIECE",
    "CheckedIndex",
    "MegatronIndex",
    "Reads",
    "Stamp",
    "changed_since",
    "check_index",
    "check_megatron_index",
    "header_index",
    "open_again",
    "parse_megatron_index",
    "read_megatron_index",
    "stamp_of",
    "write_megatron_index",
]

MEGATRON_MAGIC = b"MMIDIDX\x00\x00"
_HEADER = struct.Struct("<9sQBQQ")
_DTYPES: dict[int, np.dtype[np.generic]] = {
    1: np.dtype(np.uint8),
    2: np.dtype(np.int8),
    3: np.dtype(np.int16),
    4: np.dtype(np.int32),
    5: np.dtype(np.int64),
    6: np.dtype(np.float64),
    7: np.dtype(np.float32),
    8: np.dtype(np.uint16),
}
_TOKEN_CODES = {4, 8}  # int32 and uint16: what Megatron writes for token ids


@dataclass(frozen=True, slots=True)
class MegatronIndex:
    """A parsed and validated ``.idx``."""

    path: str
    dtype: np.dtype[np.generic]
    sequence_lengths: NDArray[np.int32]
    sequence_pointers: NDArray[np.int64]
    document_indices: NDArray[np.int64]

    @property
    def num_tokens(self) -> int:
        return int(self.sequence_lengths.sum(dtype=np.int64))

    def document_bounds(self) -> NDArray[np.int64]:
        """Token offsets where each document starts, followed by the total (D entries)."""
        seq_start = np.concatenate(([0], np.cumsum(self.sequence_lengths, dtype=np.int64)))
        return seq_start[self.document_indices]


def read_megatron_index(idx_path: str | os.PathLike[str], bin_size: int) -> MegatronIndex:
    """Parse ``idx_path`` and check it against a ``.bin`` of ``bin_size`` bytes."""
    path = os.fspath(idx_path)
    with LocalFile(path) as f:
        raw = f.pread(0, f.size).tobytes()
    return parse_megatron_index(path, raw, bin_size)


def parse_megatron_index(path: str, raw: Any, bin_size: int) -> MegatronIndex:
    """Parse the bytes of an ``.idx`` (``path`` names it in errors) against a ``.bin`` size."""
    dtype, n_seq, n_doc = _header(path, raw, len(raw))
    off = _HEADER.size
    lengths = np.frombuffer(raw, np.int32, n_seq, off)
    off += 4 * n_seq
    pointers = np.frombuffer(raw, np.int64, n_seq, off)
    off += 8 * n_seq
    docs = np.frombuffer(raw, np.int64, n_doc, off)
    total = _check_sequences(path, dtype, lengths, pointers, 0, 0)
    _check_total(path, dtype, total, bin_size)
    _check_documents(path, n_seq, len(docs), [docs])
    return MegatronIndex(path, dtype, lengths, pointers, docs)


#: Entries of an ``.idx`` checked at a time by :func:`check_index`, local or on object
#: storage (12 bytes a sequence, 8 a document entry: ~100 MB at once, whatever its size).
PIECE = 1 << 23

#: Bytes of an ``.idx`` header: what :func:`check_index` needs first.
INDEX_HEAD = _HEADER.size

#: What an index was when checked: a local file's device, inode, size and mtime_ns; an
#: object's size and ETag.
Stamp = tuple[int, int, int, int] | tuple[int, str | None]

#: How an index's bytes are read: the byte ranges ``(offset, length)`` it is given, in
#: order, as arrays (a local file reads each when asked; an object's ranged GETs run ahead).
Reads = Callable[[Sequence[tuple[int, int]]], Generator[NDArray[np.uint8], None, None]]


@dataclass(frozen=True)
class CheckedIndex:
    """An ``.idx`` checked against its ``.bin`` when opened, and read again only if
    document bounds are asked for: a ``TokenFile`` holds (and a worker's copy carries)
    a few numbers, not the index (50M documents: 1 GB, held in each process and pickled
    to each worker until 2026-12-03 locally, 2026-12-04 on object storage)."""

    path: str
    dtype: np.dtype[np.generic]
    sequences: int
    entries: int  # document entries: the documents, then one
    bin_size: int
    #: Another file or object under the path than the one checked is refused when read again.
    stamp: Stamp

    def document_bounds(self, reads: Reads | None = None) -> NDArray[np.int64]:
        """Token offsets where each document starts, followed by the total (as
        :meth:`MegatronIndex.document_bounds`), read from the index again: the local file
        at ``path``, or through ``reads`` (an object's, already found unchanged)."""
        if reads is not None:
            return self._bounds(reads)
        with open_again(self.path) as f:
            if stamp_of(f) != self.stamp:
                raise changed_since(
                    self.path, "device, inode, size, mtime", stamp_of(f), self.stamp
                )
            return self._bounds(_local_reads(f))

    def _bounds(self, reads: Reads) -> NDArray[np.int64]:
        ptr = _HEADER.size + 4 * self.sequences
        ranges = [(ptr, 8 * self.sequences), (ptr + 8 * self.sequences, 8 * self.entries)]
        with closing(reads(ranges)) as got:
            pointers = next(got).view(np.int64)
            docs = next(got).view(np.int64)
        return _bounds_into(docs, pointers, self.bin_size, self.dtype.itemsize)


def _bounds_into(
    docs: NDArray[np.int64], pointers: NDArray[np.int64], bin_size: int, itemsize: int
) -> NDArray[np.int64]:
    """Each document entry's token offset, written over ``docs`` (a buffer of its own,
    checked non-decreasing from 0 to ``len(pointers)``): 50M documents peaked at 1.5 GB
    held at once (the pointers, the entries, and three arrays as large made from them)
    until 2026-12-04, and at the pointers and the entries now."""
    if not docs.flags.writeable:
        docs = docs.copy()
    # The entries equal to S (the end of the tokens: the last, and empty documents
    # before it) are a suffix; the others index the pointers, checked to be the
    # lengths' running sums in bytes. ``clip`` takes in place (``raise`` would buffer).
    inside = int(np.searchsorted(docs, len(pointers), side="left"))
    if inside:
        np.take(pointers, docs[:inside], out=docs[:inside], mode="clip")
    docs[inside:] = bin_size
    docs //= itemsize
    return docs


def open_again(path: str) -> LocalFile:
    """A local index checked when its source opened, opened again to read it: one deleted
    or moved since is said so (as a token file is), not with the bare "no such file" of
    an open."""
    try:
        return LocalFile(path)
    except ObjectNotFoundError as exc:
        raise gone_error(path, "token source") from exc


def changed_since(path: str, what: str, now: object, then: object) -> FormatError:
    """The error for an index found changed since it was checked: reopen the source."""
    return FormatError(
        f"{path}: changed since it was opened ({what} {now}, then {then}); reopen the source"
    )


def check_megatron_index(idx_path: str | os.PathLike[str], bin_size: int) -> CheckedIndex:
    """Check a local ``.idx`` against a ``.bin`` of ``bin_size`` bytes as
    :func:`parse_megatron_index` does, reading it :data:`PIECE` entries at a time, and
    keep none of it (:class:`CheckedIndex`)."""
    path = os.fspath(idx_path)
    with LocalFile(path) as f:
        head = f.pread(0, min(f.size, _HEADER.size))
        return check_index(path, head, f.size, bin_size, _local_reads(f), stamp_of(f))


def _local_reads(f: LocalFile) -> Reads:
    return lambda ranges: (f.pread(offset, length) for offset, length in ranges)


def header_index(path: str, head: Any, size: int, bin_size: int, stamp: Stamp) -> CheckedIndex:
    """The :class:`CheckedIndex` of an ``.idx`` of ``size`` bytes starting with ``head``,
    its header checked (the rest: :func:`check_index`, or found checked before)."""
    dtype, n_seq, n_doc = _header(path, head, size)
    return CheckedIndex(path, dtype, n_seq, n_doc, bin_size, stamp)


def check_index(
    path: str,
    head: Any,
    size: int,
    bin_size: int,
    reads: Reads,
    stamp: Stamp,
) -> CheckedIndex:
    """Check an ``.idx`` of ``size`` bytes (``head``: its first bytes, the header at
    least where it has one) against a ``.bin`` of ``bin_size`` bytes, its entries read
    through ``reads`` :data:`PIECE` at a time: the checks of :func:`parse_megatron_index`,
    the same errors, wherever the bytes come from."""
    index = header_index(path, head, size, bin_size, stamp)
    n_seq, n_doc = index.sequences, index.entries
    lengths_at, pointers_at = _HEADER.size, _HEADER.size + 4 * n_seq
    docs_at = pointers_at + 8 * n_seq
    seqs, docs = range(0, n_seq, PIECE), range(0, n_doc, PIECE)
    ranges = [
        r
        for lo in seqs
        for n in (min(PIECE, n_seq - lo),)
        for r in ((lengths_at + 4 * lo, 4 * n), (pointers_at + 8 * lo, 8 * n))
    ]
    ranges += [(docs_at + 8 * lo, 8 * min(PIECE, n_doc - lo)) for lo in docs]
    with closing(reads(ranges)) as got:
        total = 0
        for lo in seqs:
            lengths, pointers = next(got).view(np.int32), next(got).view(np.int64)
            total = _check_sequences(path, index.dtype, lengths, pointers, lo, total)
        _check_total(path, index.dtype, total, bin_size)
        _check_documents(path, n_seq, n_doc, (next(got).view(np.int64) for _ in docs))
    return index


def stamp_of(f: LocalFile) -> tuple[int, int, int, int]:
    """A local file's :data:`Stamp`."""
    st = os.fstat(f.fd)
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def _header(path: str, raw: Any, size: int) -> tuple[np.dtype[np.generic], int, int]:
    """The dtype, sequence count and document entries of an ``.idx`` of ``size`` bytes
    from its first bytes ``raw``, checked against that size."""
    if size < _HEADER.size:
        raise FormatError(
            f"{path}: truncated Megatron index: {size} bytes, the header alone needs {_HEADER.size}"
        )
    magic, version, code, n_seq, n_doc = _HEADER.unpack_from(raw)
    if magic != MEGATRON_MAGIC:
        raise FormatError(
            f"{path}: not a Megatron index: magic is {magic!r}, expected {MEGATRON_MAGIC!r}"
        )
    if version != 1:
        raise FormatError(
            f"{path}: unsupported Megatron index version {version} (expected 1): Megatron-LM "
            "writes version 1 alone, so this index is damaged or another tool's; write the "
            ".bin and .idx pair again with Megatron-LM's IndexedDatasetBuilder"
        )
    if size == _FAIRSEQ_HEAD + 12 * n_seq:
        raise _fairseq_index(path, code, n_seq)
    if code not in _DTYPES:
        raise FormatError(
            f"{path}: unknown dtype code {code} (expected one of 1..8){_unknown(code)}"
        )
    if code not in _TOKEN_CODES:
        raise FormatError(
            f"{path}: token dtype {_DTYPES[code]} is not a token type (expected uint16 or "
            "int32), as Megatron-LM's tools/preprocess_data.py writes them: write the pair "
            "again with IndexedDatasetBuilder(..., dtype=numpy.int32), or numpy.uint16 for "
            "a vocabulary under 65,536 ids"
        )
    want = _HEADER.size + 4 * n_seq + 8 * n_seq + 8 * n_doc
    if size != want:
        # Megatron's multimodal indexes end with one int8 mode a sequence (text, image).
        modes = (
            f": the {n_seq} bytes after the document indices are a multimodal index's "
            "sequence modes (IndexedDataset(..., multimodal=True)), whose sequences are not "
            "all tokens; pass a text-only .bin/.idx pair"
        ) * (n_seq > 0 and size == want + n_seq)
        raise FormatError(
            f"{path}: {'truncated' if size < want else 'trailing bytes in'} Megatron index: "
            f"header declares {n_seq} sequences and {n_doc} document entries, which need "
            f"{want} bytes; file has {size}{modes}"
        )
    return _DTYPES[code], n_seq, n_doc


def _unknown(code: int) -> str:
    """What to do with an index of a dtype code outside Megatron-LM's: 9 and 10 are
    fairseq's uint32 and uint64, in its table and in Megatron-layout forks copied from it."""
    if code == 9:
        return (
            ": fairseq's table (and forks' copied from it) has 9 for uint32, which "
            "Megatron-LM's lacks; read its .bin as raw tokens, format='raw', dtype='uint32' "
            "(without documents), or write the .bin and .idx pair again as int32"
        )
    return ": a damaged index, or another tool's; write the .bin and .idx pair again"


#: fairseq's ``MMapIndexedDataset`` index, which Megatron-LM's extends: the same magic,
#: version, dtype code and sequence count, then the sequences' sizes and pointers, and no
#: document count or document indices.
_FAIRSEQ_HEAD = 26
#: fairseq's dtype codes of token types (8 and 4 are Megatron's too; 9 is its own).
_FAIRSEQ_TOKENS = {4: "int32", 8: "uint16", 9: "uint32"}


def _fairseq_index(path: str, code: int, n_seq: int) -> FormatError:
    """The error for a fairseq index: read as Megatron's, it was "truncated", its first
    two sequence lengths taken for billions of document entries."""
    dt = _FAIRSEQ_TOKENS.get(code)
    read = (
        f"read it as raw tokens, format='raw', dtype='{dt}'"
        if dt is not None
        else f"its dtype code {code} is no token type (uint16, int32 or uint32)"
    )
    return FormatError(
        f"{path}: a fairseq index (fairseq-preprocess --dataset-impl mmap), not a "
        f"Megatron-LM one: the same header, but its {n_seq} sequences' sizes and pointers "
        f"end it, with no document indices after them. Its .bin is the tokens alone: {read}"
    )


def _check_sequences(
    path: str,
    dtype: np.dtype[np.generic],
    lengths: NDArray[np.int32],
    pointers: NDArray[np.int64],
    first: int,
    before: int,
) -> int:
    """Check sequences ``first...`` (``before`` tokens precede them); the tokens after."""
    if len(lengths) and lengths.min() < 0:
        at = first + int(np.argmax(lengths < 0))
        raise FormatError(f"{path}: corrupt index: negative sequence length at {at}")
    ends = np.cumsum(lengths, dtype=np.int64)
    expect = (ends - lengths + before) * dtype.itemsize
    if len(lengths) and not np.array_equal(pointers, expect):
        other = _OTHER[dtype]
        if np.array_equal(pointers, expect // dtype.itemsize * other.itemsize):
            raise _wrong_code(path, dtype, other, "its sequence pointers count")
        bad = int(np.flatnonzero(pointers != expect)[0])
        raise FormatError(
            f"{path}: corrupt index: sequence {first + bad} points at byte "
            f"{int(pointers[bad])}, expected {int(expect[bad])} (sum of the lengths before "
            "it): write the .bin and .idx pair again"
        )
    return before + (int(ends[-1]) if len(ends) else 0)


#: The other token dtype of each: what a converter's wrong dtype code is taken for.
_OTHER: dict[np.dtype[np.generic], np.dtype[np.generic]] = {
    np.dtype(np.uint16): np.dtype(np.int32),
    np.dtype(np.int32): np.dtype(np.uint16),
}


def _wrong_code(
    path: str, dtype: np.dtype[np.generic], wrote: np.dtype[np.generic], found: str
) -> FormatError:
    """The error for an index whose dtype code is not its tokens' (a converter whose table
    maps uint16 to code 4): said as a corrupt pointer, or as a ``.bin`` cut short ("copy
    it again", which cannot help) until 2026-12-07."""
    code = {d: c for c, d in _DTYPES.items()}
    return FormatError(
        f"{path}: dtype code {code[dtype]} ({dtype}) disagrees with the data: {found} "
        f"{wrote.itemsize}-byte tokens ({wrote}, dtype code {code[wrote]}); write the "
        f"index again with dtype code {code[wrote]} (Megatron-LM's: 8 uint16, 4 int32), or "
        "the .bin and .idx pair again"
    )


def _check_total(path: str, dtype: np.dtype[np.generic], tokens: int, bin_size: int) -> None:
    want = tokens * dtype.itemsize
    if want != bin_size and bin_size == tokens * _OTHER[dtype].itemsize and tokens:
        raise _wrong_code(
            path, dtype, _OTHER[dtype], f"the .bin's {bin_size} bytes hold its {tokens} tokens as"
        )
    if want != bin_size:
        why = (
            f"{want - bin_size} bytes short: cut short (an interrupted copy or write?); "
            "copy it again"
            if bin_size < want
            else f"{bin_size - want} bytes more than the index describes: not the .bin it "
            "was written with, or one written on after it"
        )
        raise FormatError(
            f"{path}: index describes {want} bytes of tokens but the .bin has {bin_size}, "
            f"{why}, or write the .bin and .idx pair again"
        )


def _check_documents(
    path: str, n_seq: int, n_doc: int, pieces: Iterable[NDArray[np.int64]]
) -> None:
    """Document entries (given in consecutive pieces): non-decreasing, from 0 to ``n_seq``."""
    first: int | None = None
    last = 0
    ok = n_doc > 0
    for docs in pieces:
        if not len(docs):
            continue
        if first is None:
            first = int(docs[0])
        ok = ok and int(docs[0]) >= last and not (np.diff(docs) < 0).any()
        last = int(docs[-1])
    if not ok or first != 0 or last != n_seq:
        raise FormatError(
            f"{path}: corrupt document indices: expected a non-decreasing list from 0 to "
            f"{n_seq}, found {n_doc} entries" + (f" from {first} to {last}" if n_doc else "")
        )


def write_megatron_index(
    idx_path: str | os.PathLike[str],
    dtype: np.dtype[np.generic] | type,
    sequence_lengths: NDArray[np.integer],
    document_indices: NDArray[np.integer] | None = None,
) -> None:
    """Write an ``.idx`` in Megatron's layout (used by tests and the data generator): only
    what the readers take (lengths in int32, document indices from 0 to the sequences)."""
    dt = np.dtype(dtype)
    code = next((c for c, d in _DTYPES.items() if d == dt), None)
    if code is None:
        held = sorted(str(d) for d in _DTYPES.values())
        raise ConfigError(f"{os.fspath(idx_path)}: Megatron indexes hold {held} tokens, not {dt}")
    given = np.asarray(sequence_lengths)
    outside = (given < 0) | (given > np.iinfo(np.int32).max)
    if outside.any():  # else wrapped into another length (a negative one), silently
        at = int(np.argmax(outside))
        raise ConfigError(
            f"{os.fspath(idx_path)}: sequence length {given[at]} at {at} does not fit "
            "Megatron's int32 field, whose lengths are in [0, 2**31): split the sequence"
        )
    lengths = given.astype(np.int32)
    # Each sequence's byte offset: the lengths before it (none for an empty index).
    pointers = (np.cumsum(lengths, dtype=np.int64) - lengths) * dt.itemsize
    docs = (
        np.arange(len(lengths) + 1, dtype=np.int64)
        if document_indices is None
        else np.asarray(document_indices, dtype=np.int64)
    )
    _check_documents(os.fspath(idx_path), len(lengths), len(docs), [docs])  # as read
    with open(idx_path, "wb") as f:
        f.write(_HEADER.pack(MEGATRON_MAGIC, 1, code, len(lengths), len(docs)))
        f.write(lengths.tobytes())
        f.write(pointers.astype(np.int64).tobytes())
        f.write(docs.tobytes())
