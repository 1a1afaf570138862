"""``sample_digests`` of samples read from real files: datetime64 arrays and HDF5
variable-length strings (object arrays) give digests of their values."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np

from headrace.formats import FileSource, sample_digests


def test_datetime64_samples_are_digested(tmp_path: Path) -> None:
    # Their bytes were taken through a memoryview, which refuses datetime64 and
    # timedelta64: ValueError "cannot include dtype 'M' in a buffer".
    for i in range(2):
        np.save(tmp_path / f"t{i}.npy", np.arange(4).astype("datetime64[D]") + i)
        np.save(tmp_path / f"d{i}.npy", np.arange(4).astype("timedelta64[s]") + i)
    for pattern in ("t*.npy", "d*.npy"):
        src = FileSource(f"{tmp_path}/{pattern}", format="npy", samples_per_file="header")
        got = sample_digests(src.read(0, np.arange(8)))
        assert len(set(got)) == 8
        assert sorted(sample_digests(src.read(1, np.arange(8)))) == sorted(got)
        src.close()


def test_variable_length_strings_are_digested_by_value_not_pointer(tmp_path: Path) -> None:
    # A sample of HDF5 strings is an object array: its buffer (pointers) was hashed, so
    # the same file read twice gave other digests.
    for i in range(2):
        with h5py.File(tmp_path / f"s{i}.h5", "w") as f:
            rows = np.array([[f"a{i}{j}", "b" * j] for j in range(4)], dtype=object)
            f.create_dataset("s", data=rows, dtype=h5py.string_dtype())
    digests = []
    for _ in range(2):
        src = FileSource(tmp_path, format="hdf5", samples_per_file="header", datasets=("s",))
        batch = src.read(0, np.arange(8))
        assert batch["s"].dtype == object and batch["s"].shape == (8, 2)
        digests.append(sample_digests(batch))
        src.close()
    assert digests[0] == digests[1]
    assert len(set(digests[0])) == 8
