"""Scientific files as h5py and NumPy write them, read through FileSource: what a
science or medical-imaging team meets (several writers, damaged copies)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

from headrace.errors import FormatError
from headrace.formats import FileSource, decode_hdf5
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


def _volumes(path: Path, **options: Any) -> tuple[int, int]:
    """Ten 2-row chunks of '/volumes/raw'; the byte offset and size of the third chunk."""
    x = np.arange(10 * 400, dtype="<f4").reshape(10, 20, 20)
    with h5py.File(path, "w") as f:
        ds = f.create_dataset("/volumes/raw", data=x, chunks=(2, 20, 20), **options)
        info = ds.id.get_chunk_info(2)
    return info.byte_offset, info.size


def _flip(path: Path, at: int, n: int = 8) -> bytes:
    data = bytearray(path.read_bytes())
    data[at : at + n] = bytes(b ^ 0xFF for b in data[at : at + n])
    return bytes(data)


@pytest.mark.parametrize(
    ("options", "filters"),
    [
        ({"fletcher32": True}, r"fletcher32"),
        ({"compression": "gzip", "shuffle": True}, r"shuffle, deflate \(gzip\)"),
        ({"compression": "lzf", "fletcher32": True}, r"lzf, fletcher32"),
    ],
)
def test_a_damaged_chunk_names_its_samples_and_filters(
    tmp_path: Path, options: dict[str, Any], filters: str
) -> None:
    # Flipped bytes inside the third chunk (samples 4 and 5): the error said only
    # "filter returned failure during read", not which samples, nor which check failed.
    at, size = _volumes(tmp_path / "c.h5", **options)
    data = _flip(tmp_path / "c.h5", at + size // 2)
    want = (
        r"c\.h5: dataset '/volumes/raw': the chunk of samples \[4, 6\) .*"
        rf"does not pass its filters \({filters}\)"
    )
    with pytest.raises(FormatError, match=want):
        decode_hdf5(data, name="c.h5", dataset="/volumes/raw")
    with pytest.raises(FormatError, match=want):
        decode_hdf5(data, name="c.h5", dataset="/volumes/raw", index=[5, 0])
    # Samples outside the damaged chunk still read.
    np.testing.assert_array_equal(
        decode_hdf5(data, name="c.h5", dataset="/volumes/raw", index=[7, 0])[1],
        np.arange(400, dtype="<f4").reshape(20, 20),
    )


def test_a_damaged_chunk_through_the_source_names_the_file(tmp_path: Path) -> None:
    at, size = _volumes(tmp_path / "a.h5", fletcher32=True)
    _volumes(tmp_path / "b.h5", fletcher32=True)
    (tmp_path / "a.h5").write_bytes(_flip(tmp_path / "a.h5", at + size // 2))
    src = FileSource(tmp_path, format="hdf5", datasets=("/volumes/raw",), samples_per_file="header")
    assert src.counts.tolist() == [10, 10]  # the headers are whole: counted
    with (
        pytest.raises(FormatError, match=r"a\.h5: dataset '/volumes/raw': the chunk of samples"),
        Loader(src, batch_size=4, seed=0, steps=5) as loader,
    ):
        list(loader)


def test_a_truncated_hdf5_file_says_how_long_it_should_be(tmp_path: Path) -> None:
    _volumes(tmp_path / "t.h5", compression="gzip")
    data = (tmp_path / "t.h5").read_bytes()
    with pytest.raises(
        FormatError,
        match=rf"t\.h5: truncated HDF5 file: {len(data) // 2} bytes, its superblock says "
        rf"{len(data)}",
    ):
        decode_hdf5(data[: len(data) // 2], name="t.h5", dataset="/volumes/raw")
