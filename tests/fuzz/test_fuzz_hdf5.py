"""HDF5 samples: cut, flipped (the superblock and object headers most), addresses forged.

Every 16th byte is a cut; flips are 50 in the superblock and 50 anywhere (150 and 150
under ``HEADRACE_FUZZ_ALL=1``): 340 cases a target, 13 s of CPU for the module alone
(2c, 2026-12-07; 541 cases and 21 s with all the flips).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from _harness import check
from _mutate import (
    FUZZ_ALL,
    HDF5_SUPERBLOCK,
    flips,
    forge_fields,
    truncations,
)
from _targets import TARGETS


@pytest.mark.parametrize("target", ["files_hdf5", "files_hdf5_header", "files_hdf5_gzip"])
def test_hdf5(target: str, tmp_path: Path) -> None:
    data = TARGETS[target].pristine()
    cases = truncations(data, range(0, len(data), 16))
    n = 150 if FUZZ_ALL else 50
    cases += flips(data, seed=5, count=n, regions=[(0, 96)])  # the superblock
    cases += flips(data, seed=6, count=n)
    cases += forge_fields(data, HDF5_SUPERBLOCK)
    seen = check(target, cases, tmp_path)
    assert seen["error:FormatError"] > len(cases) // 2


def test_corrupt_metadata_is_a_format_error(tmp_path: Path) -> None:
    # A flipped byte in an object header's checksummed metadata: h5py raised
    # RuntimeError ("Object visitation failed (incorrect metadata checksum ...)",
    # "Unable to synchronously check link existence") from inside headrace.
    import io

    from headrace.errors import FormatError
    from headrace.formats import FileSource, decode_hdf5
    from headrace.formats._hdf5 import hdf5_rows

    data = bytearray(TARGETS["files_hdf5"].pristine())
    data[96] ^= 0x7D  # the root group's object header
    message = r"a\.h5: corrupt HDF5 metadata: .*checksum.*copy or write it again"
    with pytest.raises(FormatError, match=message):
        decode_hdf5(bytes(data), name="a.h5", dataset="x")
    with pytest.raises(FormatError, match=message):
        hdf5_rows(io.BytesIO(bytes(data)), name="a.h5", datasets=["x"])
    TARGETS["files_hdf5"].companions(tmp_path)
    (tmp_path / "a.h5").write_bytes(bytes(data))
    with pytest.raises(FormatError, match=message):
        FileSource(tmp_path, format="hdf5", datasets=["x"], samples_per_file="header")


def test_corrupt_metadata_read_by_ranges() -> None:
    # The same damage in a file read by ranges (object storage): learning its layout
    # raised the RuntimeError; now the dataset is left to decoding, which names it.
    import numpy as np

    from headrace.errors import FormatError
    from headrace.formats._hdf5 import decode_hdf5
    from headrace.formats._hdf5_ranges import learn_layout
    from headrace.formats._sparse import SparseImage

    data = bytearray(TARGETS["files_hdf5"].pristine())
    data[96] ^= 0x7D

    def fetch(spans: list[tuple[int, int]], buf: np.ndarray) -> None:
        for a, b in spans:
            buf[a:b] = data[a:b]

    img = SparseImage(len(data), fetch, "mem://a.h5")
    assert learn_layout(img, ["x"]).data == {"x": None}
    with pytest.raises(FormatError, match=r"a\.h5: corrupt HDF5 metadata"):
        decode_hdf5(img, name="a.h5", dataset="x", index=np.array([0]))
