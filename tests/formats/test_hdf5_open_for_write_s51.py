"""An HDF5 file its writer still holds open (or left open: a killed job) is refused by name.

HDF5 1.10+ marks a file open for writing in its superblock (versions 2 and 3: what
``libver='latest'``, SWMR and netCDF-4 writers make) and clears the mark on close;
h5py's own open refuses a file so marked ("file is already open for write"). headrace
opens the bytes it fetched, where HDF5 skips that check: until 2026-12-07 such a file
was read, a simulation's output copied mid-write giving the fill value (zeros) for the
samples not yet written, without a word."""

from __future__ import annotations

import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest

from headrace.errors import FormatError
from headrace.formats import FileSource, decode_hdf5
from headrace.pipeline import Loader

ROWS = 16


def _finished(path: Path, libver: str = "latest") -> None:
    rng = np.random.default_rng(51)
    with h5py.File(path, "w", libver=libver) as f:
        f.create_dataset("data", data=rng.standard_normal((ROWS, 8)).astype(np.float32))


def _copied_mid_write(path: Path) -> None:
    """``path``: a copy of a file whose writer has written half its samples and flushed,
    as a job's output copied (or listed) while the job runs."""
    work = path.with_suffix(".writing")
    with h5py.File(work, "w", libver="latest") as f:
        ds = f.create_dataset("data", shape=(ROWS, 8), dtype=np.float32, chunks=(2, 8))
        ds[: ROWS // 2] = 1.0
        f.flush()
        shutil.copyfile(work, path)
    work.unlink()


def _read_all(folder: Path, **options: object) -> None:
    src = FileSource(folder, format="hdf5", datasets=["data"], **options)
    with Loader(src, batch_size=4, seed=0, steps=src.samples_per_epoch // 4) as loader:
        for _ in loader:
            pass


@pytest.mark.parametrize(
    "options",
    [
        {"samples_per_file": ROWS},
        {"samples_per_file": "header"},  # refused as the source opens
        {"samples_per_file": ROWS, "shuffle": "samples", "hdf5_local_ranges_above": 0},
    ],
    ids=["whole", "header", "ranges"],
)
def test_a_file_still_open_for_writing_is_refused_by_name(
    tmp_path: Path, options: dict[str, object]
) -> None:
    _finished(tmp_path / "a.h5")
    _copied_mid_write(tmp_path / "b.h5")
    with pytest.raises(OSError, match="already open for write"):
        h5py.File(tmp_path / "b.h5", "r")  # what h5py says of it
    with pytest.raises(FormatError) as got:
        _read_all(tmp_path, **options)
    text = str(got.value)
    assert text.startswith(f"{tmp_path / 'b.h5'}: "), text
    assert "open for writing" in text and "h5clear" in text, text


def test_decode_hdf5_refuses_it_too(tmp_path: Path) -> None:
    _copied_mid_write(tmp_path / "b.h5")
    with pytest.raises(FormatError, match=r"^b\.h5: .*open for writing"):
        decode_hdf5((tmp_path / "b.h5").read_bytes(), name="b.h5", dataset="data")


@pytest.mark.parametrize("libver", ["latest", "earliest"])
def test_files_closed_by_their_writers_read_as_h5py_reads_them(tmp_path: Path, libver: str) -> None:
    _finished(tmp_path / "a.h5", libver)
    got = decode_hdf5((tmp_path / "a.h5").read_bytes(), name="a.h5", dataset="data")
    with h5py.File(tmp_path / "a.h5") as f:
        np.testing.assert_array_equal(got, f["data"][()])
