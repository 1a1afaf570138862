"""Scientific files as h5py and NumPy write them, read through FileSource: what a
science or medical-imaging team meets (several writers, damaged copies)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

from headrace.formats import FileSource
from headrace.pipeline import Loader


@pytest.mark.parametrize("fmt", ["hdf5", "npy"])
@pytest.mark.parametrize("spf", [1, 2])
def test_files_of_both_byte_orders_stack_into_one_array(tmp_path: Path, fmt: str, spf: int) -> None:
    # One scanner writes big-endian, another little: the values are the same kind.
    # Their batch was a ragged object array (dtypes '<f4' and '>f4' compared unequal),
    # though np.stack makes them one native array, as it does for a batch of '>f4' alone.
    want = []
    for i, order in enumerate("<><"):
        a = (np.arange(6 * spf).reshape(spf, 2, 3) + 100 * i).astype(f"{order}f4")
        a = a if spf > 1 else a[0]
        want.extend(a if spf > 1 else [a])
        if fmt == "hdf5":
            with h5py.File(tmp_path / f"{i}.h5", "w") as f:
                f.create_dataset("/volumes/raw", data=a, chunks=True, compression="gzip")
        else:
            np.save(tmp_path / f"{i}.npy", a)
    opts: dict[str, Any] = {"datasets": ("/volumes/raw",)} if fmt == "hdf5" else {}
    src = FileSource(tmp_path, format=fmt, samples_per_file=spf, shuffle="none", **opts)
    key = "/volumes/raw" if fmt == "hdf5" else "data"
    batch = src.read(0, np.arange(3 * spf))
    assert f"{key}_shape" not in batch
    assert batch[key].dtype == np.dtype("=f4")
    np.testing.assert_array_equal(batch[key], np.stack(want))


def test_a_chunks_batch_of_both_byte_orders_is_stacked_by_the_loader(tmp_path: Path) -> None:
    # A chunk read whole (steps 1 and 2: chunks are 1, 2, 4, ... steps) is ragged where
    # its batches differ in shape; each is then laid out anew (pipeline/_layout.py).
    for i, (order, rows) in enumerate([("<", 2), (">", 2), ("<", 4), (">", 4)]):
        np.save(tmp_path / f"{i}.npy", np.full((rows, 3), i, dtype=f"{order}f4"))
    src = FileSource(tmp_path, format="npy", shuffle="none")
    with Loader(src, batch_size=2, seed=0, steps=3) as loader:
        batches = list(loader)
    for b, rows in zip(batches, [2, 4, 2], strict=True):
        assert "data_shape" not in b
        assert b["data"].dtype == np.dtype("=f4") and b["data"].shape == (2, rows, 3)
