"""A Parquet object on S3 (moto on 127.0.0.1) whose footer pyarrow reads, but whose column
chunk metadata it cannot: refused naming the object and row group, as its local copy is."""

from __future__ import annotations

import io
import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from s3util import BUCKET, S3Fixture
from s3util import store_options as options

from headrace.errors import FormatError
from headrace.formats import Table

pytestmark = pytest.mark.integration


def _histogram_mismatch() -> bytes:
    """A Parquet file whose list column's repetition was flipped from optional to required
    in the footer's schema: its size statistics' definition level histograms are one
    entry too long for it (what a flipped bit did to a fuzzed file)."""
    t = pa.table({"ids": pa.array([[i, i + 1] for i in range(8)], pa.list_(pa.int32()))})
    out = io.BytesIO()
    pq.write_table(t, out, row_group_size=4)
    raw = out.getvalue()
    start = len(raw) - 8 - struct.unpack_from("<I", raw, len(raw) - 8)[0]
    for at in range(start, start + 64):
        if raw[at] == 2:  # OPTIONAL, zigzagged: made REQUIRED
            bad = raw[:at] + b"\0" + raw[at + 1 :]
            try:  # pyarrow's reader says what is wrong (rg.column(j) aborts)
                pq.ParquetFile(io.BytesIO(bad)).read_row_group(0)
            except OSError as exc:
                if "histogram" in str(exc):
                    return bad
    raise AssertionError("no such byte in this pyarrow's footer")


def test_column_chunk_metadata_pyarrow_cannot_read_is_refused_not_an_abort(
    s3: S3Fixture, tmp_path: Path
) -> None:
    raw = _histogram_mismatch()
    path = tmp_path / "bad.parquet"
    path.write_bytes(raw)
    with Table.open(str(path)) as table, pytest.raises(FormatError, match="histogram"):
        table.read_rows(np.arange(len(table)))  # the local copy
    key = "s48-parquet-footer/bad.parquet"
    s3.server.info.boto3_client().put_object(Bucket=BUCKET, Key=key, Body=raw)
    url = f"s3://{BUCKET}/{key}"
    # Was: "terminate called after throwing an instance of 'parquet::ParquetException'",
    # the process aborted where the row group's column chunks were looked up.
    with Table.open(url, store_options=options(s3)) as table:
        with pytest.raises(FormatError, match=rf"^{url}: row group 0: .*histogram"):
            table.read_rows(np.arange(len(table)))
        with pytest.raises(FormatError, match=rf"^{url}: row group 1: .*histogram"):
            table.read_rows([5])
