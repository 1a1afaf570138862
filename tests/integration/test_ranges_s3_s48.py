"""Files on S3 (moto on 127.0.0.1) read by samples as the local files are: ArrayRecord
files by chunks with counts given that are wrong (refused by name), NPZ members picked
that leave out the first (read, not refused)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from s3util import BUCKET, FAST_RETRY, S3Fixture

from headrace.errors import DataError
from headrace.formats import FileSource
from headrace.formats._tfrecord import encode_example
from headrace.pipeline import Loader
from headrace.testing import batch_digest

pytestmark = pytest.mark.integration


def _put(s3: S3Fixture, path: Path, prefix: str) -> None:
    client = s3.server.info.boto3_client()
    client.put_object(Bucket=BUCKET, Key=f"{prefix}/{path.name}", Body=path.read_bytes())


def _source(s3: S3Fixture, prefix: str, **kw: Any) -> FileSource:
    options = {**s3.options(), "retry": FAST_RETRY}
    return FileSource(f"s3://{BUCKET}/{prefix}", store_options=options, shuffle="samples", **kw)


@pytest.mark.parametrize(("counts", "says"), [([10, 14], "its count says 14"), (14, "says 14")])
def test_a_count_given_past_the_records_is_refused_by_name_on_s3(
    s3: S3Fixture, tmp_path: Path, counts: list[int] | int, says: str
) -> None:
    # A row past the file's records looked up the chunk after the last: IndexError.
    module = pytest.importorskip(
        "array_record.python.array_record_module",
        reason="pip install array-record (the test extra has it)",
    )
    prefix = f"ar-counts-{np.asarray(counts).sum()}"
    for i in range(2):
        path = tmp_path / f"s{i}.array_record"
        writer = module.ArrayRecordWriter(str(path), "group_size:2")
        for j in range(10 + i):
            writer.write(encode_example({"x": np.array([j])}))
        writer.close()
        _put(s3, path, prefix)
    src = _source(s3, prefix, format="array_record", samples_per_file=counts)
    with pytest.raises(DataError, match=rf"s1\.array_record: holds 11 records; .*{says}"):
        with Loader(src, batch_size=4, seed=0, steps=6) as loader:
            batch_digest(loader)
    src.close()


def test_npz_members_picked_past_the_first_read_by_rows_on_s3(
    s3: S3Fixture, tmp_path: Path
) -> None:
    # The zip's magic lies in the first member's local header: with that member not
    # picked it was not fetched, and the file was refused as "not an NPZ (zip) file".
    for i in range(2):
        n = 5 + i
        path = tmp_path / f"f{i}.npz"
        np.savez(path, x=np.zeros((n, 1024)), y=np.arange(n) + 10 * i)
        _put(s3, path, "npz-first-member")
    kw: dict[str, Any] = {"format": "npz", "samples_per_file": "header", "datasets": ("y",)}
    src = _source(s3, "npz-first-member", npz_ranges_above=0, **kw)
    assert src._by_rows is not None
    got = src.read(0, np.arange(11))
    assert sorted(got["y"].tolist()) == [0, 1, 2, 3, 4, 10, 11, 12, 13, 14, 15]
    src.close()
