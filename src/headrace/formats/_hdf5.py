"""HDF5: one named dataset per file, read through h5py from bytes in memory.

Sample schema
-------------
A file holds ``N >= 1`` samples on the leading axis of one dataset (shape
``(N, *sample_shape)``); a file with one sample may also store it without
that axis (then ``index`` must be ``None``). ``index=None`` returns the whole
dataset; an ``int`` returns one sample (leading axis dropped); a sequence
of ints returns ``(len(index), *sample_shape)`` in the order asked. dtype is
the dataset's.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from headrace.errors import ConfigError, FormatError
from headrace.formats._buffer import Buffer, BufferReader, as_bytes_view

__all__ = ["decode_hdf5", "encode_hdf5"]

_HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
# HDF5 looks for its superblock at 0, 512, 1024, 2048, ... (a user block may come first).
_SUPERBLOCK_OFFSETS = (0, 512, 1024, 2048, 4096, 8192)


def _h5py() -> Any:
    try:
        import h5py
    except ImportError as exc:  # pragma: no cover
        raise ConfigError("reading HDF5 needs h5py: pip install 'headrace[hdf5]'") from exc
    return h5py


def _datasets(group: Any, h5py: Any) -> list[str]:
    names: list[str] = []
    group.visititems(lambda n, obj: names.append(n) if isinstance(obj, h5py.Dataset) else None)
    return sorted(names)


def decode_hdf5(
    data: Buffer,
    *,
    name: str,
    dataset: str,
    index: int | Sequence[int] | NDArray[np.integer] | None = None,
) -> NDArray[np.generic]:
    """Read ``dataset`` (or the samples ``index`` picks) from an HDF5 file held in ``data``.

    HDF5 copies out of its chunks, so this is one copy per sample, never
    zero-copy. Errors name the file and dataset: a wrong magic, a truncated
    file, a missing dataset (listing those present), an index out of range.
    """
    view = as_bytes_view(data, name)
    if not any(bytes(view[o : o + 8]) == _HDF5_MAGIC for o in _SUPERBLOCK_OFFSETS):
        raise FormatError(
            f"{name}: not an HDF5 file: no signature {_HDF5_MAGIC!r} (starts with "
            f"{bytes(view[:8])!r})"
        )
    h5py = _h5py()
    try:
        f = h5py.File(BufferReader(view), "r")
    except OSError as exc:
        raise FormatError(f"{name}: truncated or corrupt HDF5 ({exc})") from exc
    with f:
        obj = f.get(dataset)
        if not isinstance(obj, h5py.Dataset):
            what = "a group, not a dataset" if isinstance(obj, h5py.Group) else "no dataset"
            raise FormatError(
                f"{name}: {dataset!r} is {what}; the file's datasets are {_datasets(f, h5py)}"
                if obj is not None
                else f"{name}: no dataset {dataset!r}; the file holds {_datasets(f, h5py)}"
            )
        try:
            return _select(obj, index, name, dataset)
        except OSError as exc:
            raise FormatError(
                f"{name}: dataset {dataset!r}: truncated or corrupt data ({exc})"
            ) from exc


def _select(ds: Any, index: Any, name: str, dataset: str) -> NDArray[np.generic]:
    if index is None:
        return np.asarray(ds[()])
    if ds.ndim == 0:
        raise ConfigError(
            f"{name}: dataset {dataset!r} is a scalar; it has no sample axis to index"
        )
    n = int(ds.shape[0])
    if isinstance(index, (int, np.integer)):
        i = int(index)
        if not -n <= i < n:
            raise ConfigError(
                f"{name}: dataset {dataset!r}: index {i} out of range for {n} samples"
            )
        return np.asarray(ds[i % n])
    idx = np.asarray(index, dtype=np.int64).reshape(-1)
    bad = idx[(idx < -n) | (idx >= n)]
    if bad.size:
        raise ConfigError(
            f"{name}: dataset {dataset!r}: index {int(bad[0])} out of range for {n} samples"
        )
    idx %= max(n, 1)
    # h5py fancy indexing needs strictly increasing indices: read each
    # distinct sample once, in order, then put them in the order asked.
    uniq, inverse = np.unique(idx, return_inverse=True)
    got = np.asarray(ds[uniq]) if uniq.size else np.empty((0, *ds.shape[1:]), ds.dtype)
    if uniq.size == idx.size and bool((np.diff(idx) > 0).all()):
        return got
    return got[inverse]


def encode_hdf5(
    arrays: Mapping[str, NDArray[np.generic]],
    *,
    chunks: bool = False,
    compression: str | None = None,
) -> bytes:
    """HDF5 bytes holding each array as a dataset, deterministically (no timestamps)."""
    h5py = _h5py()
    buf = io.BytesIO()
    with h5py.File(buf, "w", libver="latest", track_order=False) as f:
        for key, arr in arrays.items():
            f.create_dataset(
                key,
                data=arr,
                chunks=(True if chunks or compression else None),
                compression=compression,
                track_times=False,
            )
    return buf.getvalue()
