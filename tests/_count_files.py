"""Datasets of NPY, NPZ and HDF5 files holding different numbers of samples, for the
tests of per-file counts (tests/formats/test_file_counts.py, locally, and
tests/integration/test_file_counts_s3.py, on S3).

File ``f``'s sample ``i`` holds ``1000 f + i`` (plus noise, where asked), so a batch
says which samples it holds; ``y`` is that number, beside ``x`` in NPZ and HDF5.
"""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np

COUNTS = [5, 3, 0, 7, 1, 4, 6, 2]  # a file of none, one of one, a short last shard
EXT = {"npy": "npy", "npz": "npz", "npzc": "npz", "hdf5": "h5"}
FORMAT = {"npzc": "npz"}  # kinds that are another's format (compressed NPZ)


def rows(f: int, c: int, shape: tuple[int, int] = (2, 3), noise: bool = False) -> np.ndarray:
    """File ``f``'s ``c`` samples of ``shape``: ``1000 f + i`` in every element, plus
    noise in [0, 1) seeded by ``f`` (which deflate cannot shrink) where asked."""
    base = (1000 * f + np.arange(c, dtype=np.float32)).reshape(c, 1, 1)
    if noise:
        return base + np.random.default_rng(f).random((c, *shape), dtype=np.float32)
    return np.broadcast_to(base, (c, *shape)).copy()


def write(path: Path, kind: str, x: np.ndarray) -> None:
    """``x`` (samples of 2-D arrays) and ``y``, their numbers, as a ``kind`` file."""
    y = x[:, 0, 0].astype(np.int64)
    if kind == "npy":
        np.save(path, x)
    elif kind == "npz":
        np.savez(path, x=x, y=y)
    elif kind == "npzc":
        np.savez_compressed(path, x=x, y=y)
    else:
        with h5py.File(path, "w") as h:
            h.create_dataset("x", data=x, chunks=True if len(x) else None)
            h["y"] = y


def dataset(
    root: Path,
    kind: str,
    counts: list[int] = COUNTS,
    *,
    shape: tuple[int, int] = (2, 3),
    noise: bool = False,
) -> Path:
    """Files ``root/r000.<ext>``, ... holding ``counts`` samples each; ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    for f, c in enumerate(counts):
        write(root / f"r{f:03d}.{EXT[kind]}", kind, rows(f, c, shape, noise))
    return root
