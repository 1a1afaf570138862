"""Parquet objects that fail to open on S3 (s49): each named and kept on the first
error's ``others_failed``, as local files' are, not the first alone."""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from s3util import BUCKET, S3Fixture
from s3util import store_options as options

from headrace.errors import FormatError
from headrace.formats import TableSource

pytestmark = pytest.mark.integration


def test_every_damaged_parquet_object_is_named(s3: S3Fixture) -> None:
    client = s3.server.info.boto3_client()
    buf = io.BytesIO()
    pq.write_table(pa.table({"x": np.arange(50, dtype=np.int64)}), buf)
    good = buf.getvalue()
    bodies = {0: good, 1: good[: len(good) // 2], 2: b"tiny", 3: good, 4: good[:-9] + b"PAR1"}
    for i, body in bodies.items():
        client.put_object(Bucket=BUCKET, Key=f"s49-tables/p{i}.parquet", Body=body)
    url = f"s3://{BUCKET}/s49-tables"
    with pytest.raises(FormatError, match=r"2 other files of the table failed to open") as got:
        TableSource(url, store_options=options(s3), columns=["x"])
    assert str(got.value).startswith(f"{url}/p1.parquet: not a Parquet file")
    others = got.value.others_failed  # type: ignore[attr-defined]
    assert [str(e).split(": ")[0] for e in others] == [f"{url}/p2.parquet", f"{url}/p4.parquet"]
    assert "4 bytes is too small" in str(others[0])
