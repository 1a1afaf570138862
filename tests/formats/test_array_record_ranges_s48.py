"""ArrayRecord files read by chunks (``shuffle="samples"``): counts given that are wrong,
local and through file:// (read as objects are)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from headrace.errors import DataError
from headrace.formats import FileSource
from headrace.formats._tfrecord import encode_example
from headrace.pipeline import Loader
from headrace.testing import batch_digest

module = pytest.importorskip(
    "array_record.python.array_record_module",
    reason="pip install array-record (the test extra has it)",
)


def _shards(tmp_path: Path) -> None:
    """Two shards of 10 and 11 Examples, 2 a chunk."""
    for i in range(2):
        writer = module.ArrayRecordWriter(str(tmp_path / f"s{i}.array_record"), "group_size:2")
        for j in range(10 + i):
            writer.write(encode_example({"x": np.array([j + 100 * i])}))
        writer.close()


@pytest.mark.parametrize("remote", [False, True])
@pytest.mark.parametrize(
    ("counts", "says"),
    [
        ([10, 14], "its count says 14"),
        (14, "samples_per_file=14 says 14"),
        ([10, 9], "its count says 9"),
    ],
)
def test_a_count_given_that_is_wrong_is_refused_by_name_read_by_chunks(
    tmp_path: Path, remote: bool, counts: list[int] | int, says: str
) -> None:
    # Read by chunks, a row past the file's records looked up the chunk after the last:
    # IndexError ("index 7 is out of bounds for axis 0 with size 7"), not the file named
    # with both counts.
    _shards(tmp_path)
    src = FileSource(
        f"file://{tmp_path}/*.array_record" if remote else tmp_path,
        format="array_record",
        shuffle="samples",
        samples_per_file=counts,
    )
    with pytest.raises(DataError, match=rf"s1\.array_record: holds 11 records; {says}"):
        with Loader(src, batch_size=4, seed=0, steps=6) as loader:
            batch_digest(loader)
    src.close()
