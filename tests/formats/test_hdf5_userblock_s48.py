"""An HDF5 file after a user block of 16 KiB or more (h5py's ``userblock_size``, any
power of two from 512) is read as h5py opens it: its signature was looked for up to
8 KiB only, and the file refused as "not an HDF5 file"."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest

from headrace.errors import FormatError
from headrace.formats import FileSource


@pytest.mark.parametrize("userblock", [0, 16384, 65536])
@pytest.mark.parametrize("url", [False, True])
def test_a_file_after_a_large_user_block_reads(tmp_path: Path, userblock: int, url: bool) -> None:
    x = np.arange(6 * 4, dtype=np.float32).reshape(6, 4)
    with h5py.File(tmp_path / "a.h5", "w", userblock_size=userblock) as f:
        f["x"] = x
    where = tmp_path.as_uri() if url else tmp_path
    ranged = {"hdf5_ranges_above": 1} if url else {}
    with FileSource(
        where, format="hdf5", datasets=("x",), samples_per_file="header", **ranged
    ) as src:
        got = src.read(0, np.arange(6))
    np.testing.assert_array_equal(got["x"][np.argsort(got["index"])], x)


def test_a_file_with_no_signature_anywhere_is_still_refused(tmp_path: Path) -> None:
    (tmp_path / "a.h5").write_bytes(b"not hdf5" * 5000)
    with pytest.raises(
        FormatError, match=r"not an HDF5 file: no signature .*starts with b'not hdf5'"
    ):
        with FileSource(tmp_path, format="hdf5", datasets=("x",), samples_per_file="header") as src:
            src.read(0, np.arange(1))
