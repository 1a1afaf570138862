"""Arrow IPC objects on S3 (moto on 127.0.0.1) whose record batch headers do not add up are
refused at open, as their local copies are: never read as the rows a header claims."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from s3util import BUCKET, S3Fixture
from s3util import store_options as options

from headrace.errors import FormatError
from headrace.formats import Table
from headrace.formats._arrow_format import _Flat

pytestmark = pytest.mark.integration


def _stream_claiming(path: Path, rows: int) -> int:
    """An IPC stream of one 5-row record batch whose header says ``rows`` rows (its
    columns' field nodes still say 5), written at ``path``; the batch's byte."""
    t = pa.table({"y": np.arange(5, dtype=np.int64), "s": ["a", "b", "c", "d", "e"]})
    with pa.OSFile(str(path), "wb") as f, pa.ipc.new_stream(f, t.schema) as w:
        w.write_table(t)
    raw = bytearray(path.read_bytes())
    schema_length = struct.unpack_from("<i", raw, 4)[0]
    at = 8 + schema_length  # the record batch's message (a schema has no body)
    length = struct.unpack_from("<i", raw, at + 4)[0]
    meta = _Flat(bytes(raw[at + 8 : at + 8 + length]))
    header = meta.table(meta.root(), 2)
    assert header is not None
    where = meta.field(header, 0)  # RecordBatch.length
    assert where is not None and meta.int64(where) == 5
    struct.pack_into("<q", raw, at + 8 + where, rows)
    path.write_bytes(bytes(raw))
    return at


@pytest.mark.parametrize("rows", [10**12, 4, 0])
def test_a_record_batch_whose_row_count_its_columns_do_not_hold_is_refused(
    s3: S3Fixture, tmp_path: Path, rows: int
) -> None:
    path = tmp_path / "claims.arrow"
    at = _stream_claiming(path, rows)
    with pytest.raises(FormatError, match="Array length did not match"):
        Table.open(str(path))  # the local copy: refused at open
    key = f"s48-arrow-rows/{rows}.arrow"
    s3.server.info.boto3_client().put_object(Bucket=BUCKET, Key=key, Body=path.read_bytes())
    # Was: opened as 10**12 rows (a read of them all, or a split of the batch into
    # sub-windows, asked for terabytes), or 4 rows (read_rows refused the batch later).
    with pytest.raises(FormatError, match=rf"message at byte {at}: .*{rows} rows.* 5") as info:
        Table.open(f"s3://{BUCKET}/{key}", store_options=options(s3))
    assert f"s3://{BUCKET}/{key}" in str(info.value)
