"""Objects of a table that fail to open on S3 for the store's reasons (s50): a GET that
fails with 5xx after its retries, a 403, an object deleted after it was listed (404).
Each is named on the first error's ``others_failed`` beside the damaged ones, as format
errors are: the first storage error alone told a user fixing a bucket of one object a
run. Faults are injected per object by the proxy."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from s3util import BUCKET, S3Fixture
from s3util import store_options as options

from headrace.emulate import FaultRule, LatencyProxy
from headrace.errors import (
    FormatError,
    ObjectNotFoundError,
    PermissionDeniedError,
    StorageError,
)
from headrace.formats import TableSource, table_token_files

pytestmark = pytest.mark.integration


def _parquet() -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.table({"x": np.arange(50, dtype=np.int64)}), buf)
    return buf.getvalue()


def _ipc() -> bytes:
    table = pa.table({"ids": [np.arange(k, dtype=np.int32) for k in range(1, 41)]})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table, max_chunksize=10)
    return bytes(sink.getvalue())


def _put(s3: S3Fixture, prefix: str, suffix: str, good: bytes, damaged: set[int]) -> str:
    """6 objects ``p0..p5`` under ``prefix``, those of ``damaged`` cut to 4 bytes."""
    client = s3.server.info.boto3_client()
    for i in range(6):
        body = b"tiny" if i in damaged else good
        client.put_object(Bucket=BUCKET, Key=f"{prefix}/p{i}{suffix}", Body=body)
    return f"s3://{BUCKET}/{prefix}"


def _faults(proxy: LatencyProxy, prefix: str, suffix: str, every: int = 1, p3: int = 500) -> None:
    """p1: 403; p3: ``p3`` (500: on every try); p4: gone (404, deleted after the
    listing). With ``every``, each ``every``-th GET of an object fails, the others pass."""
    proxy.set_faults(
        [
            FaultRule(status=status, match=f"GET /{BUCKET}/{prefix}/p{i}{suffix}", every=every)
            for i, status in ((1, 403), (3, p3), (4, 404))
        ]
    )


def _named(e: object) -> str:
    """The object an error names first."""
    found = re.search(r"s3://\S+?\.(parquet|arrow)", str(e))
    assert found is not None, str(e)
    return found.group(0)


def _check(got: BaseException, url: str, suffix: str) -> None:
    """p1's 403 raised; p2 (damaged), p3 (500s), p4 (gone) and p5 (damaged) its others."""
    assert isinstance(got, PermissionDeniedError)
    assert _named(got) == f"{url}/p1{suffix}"
    others = got.others_failed  # type: ignore[attr-defined]
    assert [_named(e) for e in others] == [f"{url}/p{i}{suffix}" for i in (2, 3, 4, 5)]
    assert [type(e) for e in others][0:1] == [FormatError]
    assert isinstance(others[1], StorageError) and not isinstance(others[1], FormatError)
    assert isinstance(others[2], ObjectNotFoundError)
    assert isinstance(others[3], FormatError)
    assert "4 other files of the table failed to open too" in got.__notes__[-1]


def test_every_parquet_object_that_fails_to_open_is_named(
    s3: S3Fixture, proxy: LatencyProxy
) -> None:
    url = _put(s3, "s50-pq", ".parquet", _parquet(), {2, 5})
    _faults(proxy, "s50-pq", ".parquet")
    with pytest.raises(StorageError) as got:
        TableSource(url, store_options=options(s3, proxy.endpoint), columns=["x"])
    _check(got.value, url, ".parquet")


def test_every_arrow_object_that_fails_to_open_is_named(s3: S3Fixture, proxy: LatencyProxy) -> None:
    url = _put(s3, "s50-ipc", ".arrow", _ipc(), {2, 5})
    _faults(proxy, "s50-ipc", ".arrow")
    with pytest.raises(StorageError) as got:
        TableSource(url, store_options=options(s3, proxy.endpoint), columns=["ids"])
    _check(got.value, url, ".arrow")


def test_every_arrow_object_that_fails_to_open_is_named_when_packing(
    s3: S3Fixture, proxy: LatencyProxy
) -> None:
    url = _put(s3, "s50-pack", ".arrow", _ipc(), {2, 5})
    _faults(proxy, "s50-pack", ".arrow")
    with pytest.raises(StorageError) as got:
        table_token_files(url, "ids", store_options=options(s3, proxy.endpoint))
    _check(got.value, url, ".arrow")


def test_every_row_offset_fetch_that_fails_is_named_when_packing(
    s3: S3Fixture, proxy: LatencyProxy
) -> None:
    # The header walks pass (an object's first GET, which reads it whole), then the row
    # offsets' GETs fail: every object's, not the first's alone, is named. (403s and
    # 404s, not retried: a retry of a 500 could land on a GET that passes.)
    url = _put(s3, "s50-offsets", ".arrow", _ipc(), set())
    _faults(proxy, "s50-offsets", ".arrow", every=2, p3=403)
    with pytest.raises(StorageError) as got:
        table_token_files(url, "ids", store_options=options(s3, proxy.endpoint))
    assert isinstance(got.value, PermissionDeniedError)
    assert _named(got.value) == f"{url}/p1.arrow"
    others = got.value.others_failed  # type: ignore[attr-defined]
    assert [_named(e) for e in others] == [f"{url}/p{i}.arrow" for i in (3, 4)]
    assert isinstance(others[1], ObjectNotFoundError)
    assert "2 other files" in got.value.__notes__[-1]


def test_one_object_that_fails_to_open_is_raised_alone(s3: S3Fixture, proxy: LatencyProxy) -> None:
    url = _put(s3, "s50-one", ".parquet", _parquet(), set())
    proxy.set_faults([FaultRule(status=403, match=f"GET /{BUCKET}/s50-one/p1.parquet")])
    with pytest.raises(PermissionDeniedError, match=r"s50-one/p1\.parquet") as got:
        TableSource(url, store_options=options(s3, proxy.endpoint), columns=["x"])
    assert got.value.others_failed == []  # type: ignore[attr-defined]


def test_check_json_lists_each_object_that_fails_to_open(
    s3: S3Fixture, proxy: LatencyProxy, tmp_path: Path
) -> None:
    from headrace.cli import main

    url = _put(s3, "s50-check", ".parquet", _parquet(), {2})
    # 403s and 404s (not retried: the check's default retries back off for seconds).
    proxy.set_faults(
        [
            FaultRule(status=status, match=f"GET /{BUCKET}/s50-check/p{i}.parquet")
            for i, status in ((1, 403), (4, 404))
        ]
    )
    info = s3.server.info
    opts = [f"endpoint={proxy.endpoint}", f"region={info.region}", "path_style=true"]
    opts += [f"access_key_id={info.access_key_id}", f"secret_access_key={info.secret_access_key}"]
    flags = [x for o in opts for x in ("--store-option", o)]
    out = tmp_path / "r.json"
    argv = ["check", url, "--format", "table", "--columns", "x", "--json", str(out)]
    assert main([*argv, *flags]) == 2
    problems = json.loads(out.read_text())["problems"]
    assert [_named(p["message"]) for p in problems] == [f"{url}/p{i}.parquet" for i in (1, 2, 4)]
    assert [p["error"] for p in problems] == [
        "PermissionDeniedError",
        "FormatError",
        "ObjectNotFoundError",
    ]


def test_every_listed_url_that_fails_its_head_is_named(s3: S3Fixture, proxy: LatencyProxy) -> None:
    # A list of URLs is asked for by a HEAD each: every one that fails (gone, 403) is
    # named, not the first alone.
    url = _put(s3, "s50-heads", ".parquet", _parquet(), set())
    proxy.set_faults([FaultRule(status=403, match=f"HEAD /{BUCKET}/s50-heads/p4.parquet")])
    urls = [f"{url}/p{i}.parquet" for i in (0, 1, 2, 3, 4)]
    urls[1], urls[3] = f"{url}/gone1.parquet", f"{url}/gone3.parquet"
    with pytest.raises(ObjectNotFoundError) as got:
        TableSource(urls, store_options=options(s3, proxy.endpoint), columns=["x"])
    assert _named(got.value) == f"{url}/gone1.parquet"
    others = got.value.others_failed  # type: ignore[attr-defined]
    assert [_named(e) for e in others] == [f"{url}/gone3.parquet", f"{url}/p4.parquet"]
    assert [type(e) for e in others] == [ObjectNotFoundError, PermissionDeniedError]
