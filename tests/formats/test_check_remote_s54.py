"""check() over a Parquet table on S3 (moto on 127.0.0.1) where a shard was deleted after
the table was opened, or one row group does not decode: what it says, and what it GETs."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from _bucket import bucket_fixture
from headrace.errors import ObjectNotFoundError
from headrace.formats import TableSource
from headrace.io import RetryPolicy
from headrace.pipeline import check

BUCKET = "check-s54"
ROWS, GROUP = 300, 100  # rows a shard, rows a row group
NAMES = [f"data/train-{i:05d}-of-00003.parquet" for i in range(3)]
KW: dict[str, Any] = {"columns": ["input_ids", "labels"], "width": 64}


def _shard(i: int, arrow: bool = False) -> bytes:
    rng = np.random.default_rng(54 + i)
    ids = [rng.integers(0, 32_000, n).astype(np.int32) for n in rng.integers(3, 64, ROWS)]
    labels = [a.astype(np.int64) for a in ids]
    table = pa.table({"input_ids": pa.array(ids, pa.list_(pa.int32())), "labels": labels})
    sink = pa.BufferOutputStream()
    if arrow:  # an Arrow IPC file of record batches of GROUP rows
        with pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table, max_chunksize=GROUP)
    else:
        pq.write_table(table, sink, row_group_size=GROUP)
    return bytes(sink.getvalue().to_pybytes())


s3 = bucket_fixture(BUCKET)


def _source(s3: Any, prefix: str, files: dict[str, bytes], **kw: Any) -> TableSource:
    client = s3.info.boto3_client()
    for name, body in files.items():
        client.put_object(Bucket=BUCKET, Key=f"{prefix}/{name}", Body=body)
    options = {**s3.info.store_options(), "retry": RetryPolicy(attempts=3, base_delay_s=0.01)}
    return TableSource(f"s3://{BUCKET}/{prefix}/data/", store_options=options, **KW, **kw)


@pytest.mark.parametrize("suffix", [".parquet", ".arrow"])
def test_a_shard_deleted_after_opening_is_named_once_in_a_few_gets(s3: Any, suffix: str) -> None:
    """Its rows are listed (as check() lists a local file deleted under it), one line; each
    probe of the halving that finds them GOT the object again: 17,241 404s, 88 s for a
    shard of 6,500 rows (here 1,354 404s for 300 rows, Arrow's 1,096; a line a row group)."""
    names = [n.replace(".parquet", suffix) for n in NAMES]
    prefix = f"gone{suffix}"
    files = {n: _shard(i, suffix == ".arrow") for i, n in enumerate(names)}
    src = _source(s3, prefix, files)
    s3.info.boto3_client().delete_object(Bucket=BUCKET, Key=f"{prefix}/{names[1]}")
    report = check(src, batch_size=16)
    assert [p.sample for p in report.problems] == list(range(ROWS, 2 * ROWS))
    assert {p.error for p in report.problems} == {ObjectNotFoundError.__name__}
    (line,) = report.grouped  # one message, not one per row group's byte range
    # (the range of the read that found it gone, as every other such refusal names it)
    assert f"s3://{BUCKET}/{prefix}/{names[1]}, bytes [" in line, line
    assert "no such object now;" in line, line
    assert report.samples == 3 * ROWS and report.complete
    stats = src.object_stats
    assert stats is not None
    assert stats.failures <= 3 * (ROWS // GROUP), stats  # a group's GET at most (in flight)
    src.close()
    # Put back, as the message says, it reads again (the next loader asks again).
    s3.info.boto3_client().put_object(
        Bucket=BUCKET, Key=f"{prefix}/{names[1]}", Body=files[names[1]]
    )
    assert check(src, batch_size=16).ok
    src.close()


def _corrupt_group(body: bytes, group: int) -> bytes:
    """``body`` with the first page header of ``input_ids`` in row group ``group`` zeroed:
    that chunk no longer decodes (the footer, and every other chunk, still do)."""
    chunk = pq.ParquetFile(pa.BufferReader(body)).metadata.row_group(group).column(0)
    start = chunk.dictionary_page_offset or chunk.data_page_offset
    return body[:start] + bytes(64) + body[start + 64 :]


def test_a_corrupt_row_group_costs_check_no_more_bytes_than_a_clean_one(s3: Any) -> None:
    """A read that fails kept none of the other row groups it fetched: the halves check()
    reads again fetched them again (here 3.28x the table's bytes, 28 GETs; clean 1.58x, 13)."""
    files = {n: _shard(i) for i, n in enumerate(NAMES)}
    got = []
    for prefix in ("clean", "bad"):
        if prefix == "bad":
            files[NAMES[1]] = _corrupt_group(files[NAMES[1]], 1)
        src = _source(s3, prefix, files)
        report = check(src, batch_size=16)
        assert len(report.problems) == (GROUP if prefix == "bad" else 0)
        stats = src.object_stats
        assert stats is not None
        got.append(stats.bytes)
        src.close()
    assert got[1] <= 1.5 * got[0], got  # 2.08x before
