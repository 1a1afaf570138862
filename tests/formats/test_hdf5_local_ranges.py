"""Local HDF5 files of many samples under shuffle="samples": the metadata and the chunks a
read asks, read by ranges (formats/_hdf5_ranges.py), not the whole file for each read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

from headrace.errors import ConfigError, FormatError
from headrace.formats import FileSource
from headrace.pipeline import Loader
from headrace.testing import assert_resume_exact, batch_digest

LAYOUTS: dict[str, dict[str, Any]] = {
    "gzip": {"chunks": (1, 32, 32), "compression": "gzip"},
    "lzf-shuffle": {"chunks": (2, 32, 32), "compression": "lzf", "shuffle": True},
    "straddling": {"chunks": (3, 16, 32), "compression": "gzip", "fletcher32": True},
    "contiguous": {},
    "unfiltered chunks": {"chunks": (5, 32, 32)},
}


def _write(root: Path, layout: str, files: int = 4, rows: int = 40) -> dict[int, np.ndarray]:
    out = {}
    for i in range(files):
        a = np.random.default_rng(i).standard_normal((rows - 3 * i, 32, 32)).astype(np.float32)
        with h5py.File(root / f"{i}.h5", "w") as f:
            f.create_dataset("v/x", data=a, **LAYOUTS[layout])
            f.create_dataset("v/y", data=np.arange(len(a)) + 1000 * i)
        out[i] = a
    return out


def _digest(src: FileSource, steps: int = 6, batch: int = 5) -> str:
    with Loader(src, batch_size=batch, seed=3, steps=steps) as loader:
        return batch_digest(loader)


def _source(root: Path, **kw: Any) -> FileSource:
    kw.setdefault("samples_per_file", "header")
    kw.setdefault("shuffle", "samples")
    return FileSource(root, format="hdf5", datasets=("v/x", "v/y"), **kw)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_ranges_give_the_whole_files_batches(tmp_path: Path, layout: str) -> None:
    arrays = _write(tmp_path, layout)
    whole = _source(tmp_path, hdf5_local_ranges_above=None)
    ranged = _source(tmp_path, hdf5_local_ranges_above=0)
    assert whole._ranged is None and ranged._ranged is not None
    assert _digest(ranged) == _digest(whole)
    if layout != "contiguous":
        # 30 of the 142 samples (6 steps of 5): not the whole files.
        assert ranged.stats.bytes < 0.85 * whole.stats.bytes  # small files: 64 KiB gaps
    b = ranged.read(1, np.arange(60))
    files, items = ranged.file_item(b["index"])
    want = np.stack([arrays[int(f)][int(i)] for f, i in zip(files, items, strict=True)])
    np.testing.assert_array_equal(b["v/x"], want)
    np.testing.assert_array_equal(b["v/y"], 1000 * files + items)
    whole.close()
    ranged.close()


def test_files_of_16_mb_read_a_whole_file_per_read_no_more(tmp_path: Path) -> None:
    # 4 files of 1,000 chunked 64x64 float32 samples (16 MB each), 4 steps of 8: whole,
    # every read fetched each file it touched (fails before: amplification ~100 and
    # more; the default starts at 4 MiB).
    for i in range(4):
        a = np.random.default_rng(i).standard_normal((1000, 64, 64)).astype(np.float32)
        with h5py.File(tmp_path / f"{i}.h5", "w") as f:
            f.create_dataset("v/x", data=a, chunks=(1, 64, 64))
            f.create_dataset("v/y", data=np.arange(1000))
    src = _source(tmp_path, samples_per_file=1000)
    assert src._ranged is not None
    baseline = _source(tmp_path, samples_per_file=1000, mode="map-style")
    assert _digest(src, steps=4, batch=8) == _digest(baseline, steps=4, batch=8)
    assert 1.0 <= src.stats.amplification < 8.0
    src.close()
    baseline.close()


def test_resume_and_a_file_changed_under_the_run(tmp_path: Path) -> None:
    _write(tmp_path, "gzip")
    src = _source(tmp_path, hdf5_local_ranges_above=0)
    assert_resume_exact(lambda: Loader(src, batch_size=5, seed=2), steps=8, resume_at=[0, 3, 8])
    with h5py.File(tmp_path / "2.h5", "a") as f:  # written in place since the listing
        f["v/y"][0] = -1
    with pytest.raises(Exception, match=r"2\.h5: the file changed since it was listed"):
        for k in range(0, 148, 37):
            src.read(9, np.arange(k, k + 37))
    src.close()


def test_a_truncated_local_file_says_how_long_it_should_be(tmp_path: Path) -> None:
    _write(tmp_path, "gzip")
    data = (tmp_path / "1.h5").read_bytes()
    (tmp_path / "1.h5").write_bytes(data[: len(data) // 2])
    src = _source(tmp_path, samples_per_file=[40, 37, 34, 31], hdf5_local_ranges_above=0)
    with pytest.raises(FormatError, match=r"1\.h5: truncated HDF5 file: \d+ bytes, its superbl"):
        src.read(0, np.arange(142))
    src.close()


def test_the_size_is_checked(tmp_path: Path) -> None:
    _write(tmp_path, "gzip", files=1)
    with pytest.raises(ConfigError, match=r"hdf5_local_ranges_above must be a size in bytes"):
        _source(tmp_path, hdf5_local_ranges_above=-1)


def test_big_endian_datasets_give_native_batches_as_when_stacked(tmp_path: Path) -> None:
    # h5py gives a '>f4' dataset's rows as '>f4'; a batch stacked a sample at a time
    # was native float32 (np.stack's), and so is one gathered a file at a time.
    for i in range(3):
        with h5py.File(tmp_path / f"{i}.h5", "w") as f:
            f.create_dataset("x", data=np.arange(36, dtype=">f4").reshape(12, 3) + 100 * i)
    kw: dict[str, Any] = {"format": "hdf5", "datasets": ("x",), "samples_per_file": 12}
    ranged = FileSource(tmp_path, shuffle="samples", **kw)
    whole = FileSource(tmp_path, shuffle="samples", mode="map-style", **kw)
    got, want = ranged.read(2, np.arange(36)), whole.read(2, np.arange(36))
    assert got["x"].dtype.str == want["x"].dtype.str == "<f4"
    assert batch_digest([got]) == batch_digest([want])
    ranged.close()
    whole.close()
