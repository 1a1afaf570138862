"""HDF5 as a scientist writes it with h5py (session 55's journey): what a damaged chunk index
does. A version-1 B-tree (h5py's default index) keeps each chunk's position in the dataset as
a key, with no checksum: a flipped bit there loses the chunk, and HDF5 (h5py alike) reads its
rows as the fill value, without an error. Read by ranges, headrace walks every key."""

from __future__ import annotations

import struct
from pathlib import Path

import h5py
import numpy as np
import pytest

from headrace.errors import FormatError
from headrace.formats import FileSource
from headrace.pipeline import Loader

N = 24
CHUNK = (4, 2, 8, 8)


def _damaged(path: Path, row: int, bad_row: int) -> np.ndarray:
    """A file whose chunk of rows ``[row, row + 4)`` of ``train/x`` is keyed ``bad_row`` in
    the chunk B-tree (one bit flipped); returns the data written."""
    x = np.random.default_rng(55).normal(size=(N, *CHUNK[1:])).astype(np.float32)
    with h5py.File(path, "w") as f:
        g = f.create_group("train")
        g.create_dataset("x", data=x, chunks=CHUNK, compression="gzip")
        g.create_dataset("y", data=np.arange(N))
        info = g["x"].id.get_chunk_info_by_coord((row, 0, 0, 0))
    data = bytearray(path.read_bytes())
    # A key: the chunk's stored size (u32), filter mask (u32), its offset on each axis and
    # a 0 for the element (u64 each).
    key = struct.pack("<II5Q", info.size, 0, row, 0, 0, 0, 0)
    at = data.find(key)
    assert at > 0 and data.find(key, at + 1) < 0
    data[at + 8 : at + 16] = struct.pack("<Q", bad_row)
    path.write_bytes(bytes(data))
    with h5py.File(path) as f:  # h5py reads the lost chunk's rows as the fill value
        assert bad_row == row or not f["train/x"][()][row : row + 4].any()
    return x


def _source(path: Path, ranges: bool) -> FileSource:
    """The file read by ranges (its rows), or whole as one sample (every chunk read)."""
    return FileSource(
        [str(path)], format="hdf5", datasets=("train/x", "train/y"),
        samples_per_file="header" if ranges else 1, shuffle="samples",
        hdf5_local_ranges_above=0 if ranges else None,
    )  # fmt: skip


@pytest.mark.parametrize("ranges", [True, False], ids=["ranges", "whole"])
@pytest.mark.parametrize(
    "bad_row", [20 | 1 << 63, 20 | 1 << 40, 20 ^ 8], ids=["bit-63", "bit-40", "bit-3"]
)
def test_a_chunk_key_off_its_grid_is_refused(tmp_path: Path, bad_row: int, ranges: bool) -> None:
    # Before: bit 63 leaked an OverflowError naming no file by ranges (the key as int64); a
    # key past the dataset's extent (28 of 24 rows) read rows 20-23 as zeros, as h5py does,
    # without a word. (A key between chunks, 21, HDF5 refuses itself: "bad coordinate
    # offset".) Read whole for rows, the index is not walked (see docs/formats.md).
    _damaged(tmp_path / "a.h5", 20, bad_row)
    src = _source(tmp_path / "a.h5", ranges)
    with pytest.raises(FormatError) as got, Loader(src, batch_size=N, seed=0, steps=1) as loader:
        next(iter(loader))
    said = str(got.value)
    assert "a.h5" in said and "'train/x'" in said and f"({bad_row}, 0, 0, 0)" in said
    assert "chunk index" in said and "copy the file again" in said


def test_an_intact_file_read_by_ranges_still_reads(tmp_path: Path) -> None:
    # The check holds a resized dataset (HDF5 prunes chunks past a shrunk extent), sparse
    # chunks never written (their rows the fill value, as written), and chunks lzf could not
    # shrink (stored as is, their filter mask saying lzf was skipped; with fletcher32, not).
    noise = np.random.default_rng(2).integers(0, 256, (26, 3, 16), dtype=np.uint8)
    with h5py.File(tmp_path / "a.h5", "w") as f:
        x = f.create_dataset(
            "x", shape=(40, 3), maxshape=(None, 3), chunks=(4, 2), dtype="f4", fillvalue=-1
        )
        x[0:8] = 1.0
        x[20:30] = 2.0
        x.resize(26, axis=0)
        f.create_dataset("z", data=noise, chunks=(4, 3, 16), compression="lzf")
        f.create_dataset("w", data=noise, chunks=(4, 3, 16), compression="lzf", fletcher32=True)
        masks = set()
        f["z"].id.chunk_iter(lambda info: masks.add(info.filter_mask))
        assert 1 in masks  # chunks stored as is (the last, half padding, shrinks)
        want = {k: f[k][()] for k in ("x", "z", "w")}
    src = FileSource(
        [str(tmp_path / "a.h5")], format="hdf5", datasets=("x", "z", "w"),
        samples_per_file="header", shuffle="samples", hdf5_local_ranges_above=0,
    )  # fmt: skip
    with Loader(src, batch_size=26, seed=0, steps=1) as loader:
        batch = next(iter(loader))
    rows = src.file_item(batch["index"])[1]
    for k, v in want.items():
        np.testing.assert_array_equal(batch[k], v[rows])


@pytest.mark.parametrize("ranges", [True, False], ids=["ranges", "whole"])
def test_a_chunk_key_skipping_its_filters_is_refused(tmp_path: Path, ranges: bool) -> None:
    # The key's filter mask with a bit flipped says gzip was skipped (as HDF5 marks a chunk an
    # optional filter could not shrink): HDF5 took the compressed bytes for the values and
    # left the rest of the chunk's buffer as it found it: values that differed read to read,
    # h5py's too (a fuzz of flipped metadata bits found it), read without a word.
    x = _damaged(tmp_path / "a.h5", 20, 20)  # intact
    data = bytearray((tmp_path / "a.h5").read_bytes())
    with h5py.File(tmp_path / "a.h5") as f:
        info = f["train/x"].id.get_chunk_info_by_coord((12, 0, 0, 0))
    key = struct.pack("<II5Q", info.size, 0, 12, 0, 0, 0, 0)
    at = data.find(key)
    data[at + 4 : at + 8] = struct.pack("<I", 1)
    (tmp_path / "a.h5").write_bytes(bytes(data))
    with h5py.File(tmp_path / "a.h5") as f:
        assert not np.array_equal(f["train/x"][12:16], x[12:16])
    src = _source(tmp_path / "a.h5", ranges)
    with pytest.raises(FormatError) as got, Loader(src, batch_size=N, seed=0, steps=1) as loader:
        next(iter(loader))
    said = str(got.value)
    assert "a.h5" in said and "'train/x'" in said and "(12, 0, 0, 0)" in said
    assert "filter" in said and "copy the file again" in said


@pytest.mark.parametrize("ranges", [True, False], ids=["ranges", "whole"])
def test_a_chunk_placed_past_the_files_end_is_named_so(tmp_path: Path, ranges: bool) -> None:
    # A child address in the B-tree with a bit flipped: the chunk's bytes lie past the end.
    # Read whole it was "does not pass its filters (deflate (gzip)) ... a corrupt compressed
    # stream" (HDF5's "addr overflow": no byte of it was read).
    x = np.random.default_rng(1).normal(size=(N, *CHUNK[1:])).astype(np.float32)
    with h5py.File(tmp_path / "a.h5", "w") as f:
        f.create_dataset("x", data=x, chunks=CHUNK, compression="gzip")
        info = f["x"].id.get_chunk_info_by_coord((8, 0, 0, 0))
    data = bytearray((tmp_path / "a.h5").read_bytes())
    # The child address follows the chunk's key (size, mask, offsets 8, 0, 0, 0 and 0).
    key = struct.pack("<II5Q", info.size, 0, 8, 0, 0, 0, 0)
    at = data.find(key) + len(key)
    assert data[at : at + 8] == struct.pack("<Q", info.byte_offset)
    data[at : at + 8] = struct.pack("<Q", info.byte_offset | 1 << 20)
    (tmp_path / "a.h5").write_bytes(bytes(data))
    src = FileSource(
        [str(tmp_path / "a.h5")], format="hdf5", datasets=("x",), samples_per_file="header",
        shuffle="samples", hdf5_local_ranges_above=0 if ranges else None,
    )  # fmt: skip
    with pytest.raises(FormatError) as got, Loader(src, batch_size=N, seed=0, steps=1) as loader:
        next(iter(loader))
    said = str(got.value)
    chunk = "chunk at (8, 0, 0, 0)" if ranges else "chunk of samples [8, 12)"
    assert "a.h5" in said and "'x'" in said and chunk in said and "filters" not in said
    assert "past the file's end" in said and "copy the file again" in said
