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
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from headrace.errors import ConfigError, FormatError
from headrace.io import LocalFile

__all__ = [
    "MEGATRON_MAGIC",
    "MegatronIndex",
    "parse_megatron_index",
    "read_megatron_index",
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


def parse_megatron_index(path: str, raw: bytes, bin_size: int) -> MegatronIndex:
    """Parse the bytes of an ``.idx`` (``path`` names it in errors) against a ``.bin`` size."""
    size = len(raw)
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
        raise FormatError(f"{path}: unsupported Megatron index version {version} (expected 1)")
    if code not in _DTYPES:
        raise FormatError(f"{path}: unknown dtype code {code} (expected one of 1..8)")
    if code not in _TOKEN_CODES:
        raise FormatError(
            f"{path}: token dtype {_DTYPES[code]} is not a token type (expected uint16 or int32)"
        )
    want = _HEADER.size + 4 * n_seq + 8 * n_seq + 8 * n_doc
    if size != want:
        raise FormatError(
            f"{path}: {'truncated' if size < want else 'trailing bytes in'} Megatron index: "
            f"header declares {n_seq} sequences and {n_doc} document entries, which need "
            f"{want} bytes; file has {size}"
        )
    off = _HEADER.size
    lengths = np.frombuffer(raw, np.int32, n_seq, off)
    off += 4 * n_seq
    pointers = np.frombuffer(raw, np.int64, n_seq, off)
    off += 8 * n_seq
    docs = np.frombuffer(raw, np.int64, n_doc, off)
    dtype = _DTYPES[code]
    _validate(path, dtype, lengths, pointers, docs, bin_size)
    return MegatronIndex(path, dtype, lengths, pointers, docs)


def _validate(
    path: str,
    dtype: np.dtype[np.generic],
    lengths: NDArray[np.int32],
    pointers: NDArray[np.int64],
    docs: NDArray[np.int64],
    bin_size: int,
) -> None:
    n_seq = len(lengths)
    if n_seq and lengths.min() < 0:
        raise FormatError(
            f"{path}: corrupt index: negative sequence length at {int(np.argmax(lengths < 0))}"
        )
    expect = np.concatenate(([0], np.cumsum(lengths[:-1], dtype=np.int64))) * dtype.itemsize
    if n_seq and not np.array_equal(pointers, expect):
        bad = int(np.flatnonzero(pointers != expect)[0])
        raise FormatError(
            f"{path}: corrupt index: sequence {bad} points at byte {int(pointers[bad])}, "
            f"expected {int(expect[bad])} (sum of the lengths before it)"
        )
    total = int(lengths.sum(dtype=np.int64)) * dtype.itemsize
    if total != bin_size:
        raise FormatError(
            f"{path}: index describes {total} bytes of tokens but the .bin has {bin_size}"
        )
    if len(docs) == 0 or docs[0] != 0 or docs[-1] != n_seq or (np.diff(docs) < 0).any():
        raise FormatError(
            f"{path}: corrupt document indices: expected a non-decreasing list from 0 to "
            f"{n_seq}, found {len(docs)} entries"
            + (f" from {int(docs[0])} to {int(docs[-1])}" if len(docs) else "")
        )


def write_megatron_index(
    idx_path: str | os.PathLike[str],
    dtype: np.dtype[np.generic] | type,
    sequence_lengths: NDArray[np.integer],
    document_indices: NDArray[np.integer] | None = None,
) -> None:
    """Write an ``.idx`` in Megatron's layout (used by tests and the data generator)."""
    dt = np.dtype(dtype)
    code = next((c for c, d in _DTYPES.items() if d == dt), None)
    if code is None:
        held = sorted(str(d) for d in _DTYPES.values())
        raise ConfigError(f"{os.fspath(idx_path)}: Megatron indexes hold {held} tokens, not {dt}")
    lengths = np.asarray(sequence_lengths, dtype=np.int32)
    # Each sequence's byte offset: the lengths before it (none for an empty index).
    pointers = (np.cumsum(lengths, dtype=np.int64) - lengths) * dt.itemsize
    docs = (
        np.arange(len(lengths) + 1, dtype=np.int64)
        if document_indices is None
        else np.asarray(document_indices, dtype=np.int64)
    )
    with open(idx_path, "wb") as f:
        f.write(_HEADER.pack(MEGATRON_MAGIC, 1, code, len(lengths), len(docs)))
        f.write(lengths.tobytes())
        f.write(pointers.astype(np.int64).tobytes())
        f.write(docs.tobytes())
