"""Null rows of tables on S3 (moto on 127.0.0.1) are refused as local ones are: every
column's count, its first rows and the files holding them; the rest counted from Arrow
headers and Parquet statistics, without fetching what names no more rows. And a label
column's padding is the ignore index there too."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from s3util import BUCKET, S3Fixture
from s3util import store_options as options

from headrace.errors import FormatError
from headrace.formats import Table, TableSource
from headrace.formats._table_nulls import MAX_NAMED_NULLS

pytestmark = pytest.mark.integration

URL = f"s3://{BUCKET}/table-nulls"


def _put(s3: S3Fixture, key: str, body: bytes) -> None:
    s3.server.info.boto3_client().put_object(Bucket=BUCKET, Key=f"table-nulls/{key}", Body=body)


def _shard(k: int) -> pa.Table:
    n = 1000
    return pa.table(
        {
            "label": pa.array([None if k >= 1 and i % 50 == k else k for i in range(n)]),
            "labels": pa.array([[1, 2, 3][: 1 + i % 3] for i in range(n)], pa.list_(pa.int64())),
        }
    )


def _stream(t: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, t.schema) as w:
        w.write_table(t, max_chunksize=100)
    return sink.getvalue().to_pybytes()


def test_nulls_of_a_save_to_disk_folder_and_parquet_on_s3(s3: S3Fixture, tmp_path: Path) -> None:
    files = [f"data-{k:05d}-of-00004.arrow" for k in range(4)]
    local = tmp_path / "ds"
    local.mkdir()
    state = json.dumps({"_data_files": [{"filename": f} for f in files]}).encode()
    for k, f in enumerate(files):
        (local / f).write_bytes(_stream(_shard(k)))
        _put(s3, f"ds/{f}", (local / f).read_bytes())
    (local / "state.json").write_bytes(state)
    _put(s3, "ds/state.json", state)
    for where, kw in ((str(local), {}), (f"{URL}/ds", {"store_options": options(s3)})):
        with pytest.raises(FormatError) as err:
            TableSource(where, columns=["label"], **kw)  # type: ignore[arg-type]
        msg = str(err.value)
        assert "data-00001-of-00004.arrow: column 'label': 60 rows are null: rows 1001, " in msg
        assert "3 files hold them (data-00001-of-00004.arrow: 20, " in msg
        src = TableSource(where, columns=["labels"], width=4, shuffle=False, **kw)  # type: ignore[arg-type]
        b = src.read(0, np.arange(6))
        assert (
            b["labels"].tolist() == [[1, -100, -100, -100], [1, 2, -100, -100], [1, 2, 3, -100]] * 2
        )
        src.close()
    # Parquet: each row group's statistics count its nulls; groups are fetched and
    # decoded to name rows only until MAX_NAMED_NULLS are named.
    t = pa.concat_tables([_shard(k) for k in range(1, 4)])
    pq.write_table(t, tmp_path / "n.parquet", row_group_size=100)
    _put(s3, "n.parquet", (tmp_path / "n.parquet").read_bytes())
    table = Table.open(f"{URL}/n.parquet", store_options=options(s3))
    with pytest.raises(FormatError) as err:
        table.refuse_nulls(["label"])
    msg = str(err.value)
    assert "n.parquet: column 'label': 60 rows are null: rows 1, 51, 101, 151, " in msg
    assert table.decoded == MAX_NAMED_NULLS // 2  # 2 null rows a group
    table.close()


def test_null_list_items_of_arrow_on_s3_are_refused_at_open(s3: S3Fixture) -> None:
    # As local Arrow files: the list's child node in each record batch header counts its
    # null items, so only a batch that has some is fetched (fails before: opened, and
    # refused when a read reached row 777).
    ids = [[i, None] if i in (777, 901) else [i] for i in range(1000)]
    t = pa.table(
        {"ids": pa.array(ids, pa.list_(pa.int64())), "ok": pa.array([[i] for i in range(1000)])}
    )
    _put(s3, "items/a.arrow", _stream(t))
    with pytest.raises(
        FormatError,
        match=r"a\.arrow: column 'ids': 2 row\(s\) hold null list items: rows 777, 901; .*"
        r"None not in r\['ids'\]",
    ):
        TableSource(f"{URL}/items/a.arrow", columns=["ids"], width=2, store_options=options(s3))
    ok = TableSource(
        f"{URL}/items/a.arrow", columns=["ok"], width=1, shuffle=False, store_options=options(s3)
    )
    assert ok.read(0, np.arange(5))["ok"].ravel().tolist() == [0, 1, 2, 3, 4]
    ok.close()
