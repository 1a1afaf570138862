"""Megatron-LM ``.bin``/``.idx`` pairs written as its indexed_dataset.py lays them out
(MMIDIDX, version 1, dtype code, int32 sizes, int64 pointers, int64 document indices),
and read back with NumPy alone: the independent reading tests check headrace against."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

CODES = {np.dtype(np.uint16): 8, np.dtype(np.int32): 4}


def write_pair(
    prefix: Path,
    docs: list[list[np.ndarray]],
    dtype: type,
    *,
    code: int | None = None,
    version: int = 1,
) -> Path:
    """A ``.bin``/``.idx`` pair as Megatron-LM's ``IndexedDatasetBuilder`` writes it: each
    document a list of sequences, the index its magic, version, dtype code, counts, int32
    sizes, int64 byte pointers and int64 document indices (``code``: another code)."""
    dt = np.dtype(dtype)
    sizes: list[int] = []
    doc_idx = [0]
    with open(prefix.with_suffix(".bin"), "wb") as b:
        for doc in docs:
            for seq in doc:
                b.write(np.asarray(seq, dt).tobytes())
                sizes.append(len(seq))
            doc_idx.append(len(sizes))
    lengths = np.asarray(sizes, np.int32)
    pointers = np.zeros(len(lengths), np.int64)
    pointers[1:] = np.cumsum(lengths[:-1], dtype=np.int64) * dt.itemsize
    with open(prefix.with_suffix(".idx"), "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write(struct.pack("<Q", version))
        f.write(struct.pack("<B", CODES[dt] if code is None else code))
        f.write(struct.pack("<Q", len(lengths)))
        f.write(struct.pack("<Q", len(doc_idx)))
        f.write(lengths.tobytes() + pointers.tobytes() + np.asarray(doc_idx, np.int64).tobytes())
    return prefix.with_suffix(".bin")


def read_pair(bin_path: Path) -> tuple[np.ndarray, np.ndarray]:
    """The tokens and each document's first token offset (then the total), by NumPy alone."""
    raw = bin_path.with_suffix(".idx").read_bytes()
    code = raw[17]
    n_seq, n_doc = struct.unpack_from("<QQ", raw, 18)
    sizes = np.frombuffer(raw, np.int32, n_seq, 34)
    doc_idx = np.frombuffer(raw, np.int64, n_doc, 34 + 12 * n_seq)
    tokens = np.fromfile(bin_path, {8: np.uint16, 4: np.int32}[code]).astype(np.int64)
    return tokens, np.concatenate(([0], np.cumsum(sizes, dtype=np.int64)))[doc_idx]
