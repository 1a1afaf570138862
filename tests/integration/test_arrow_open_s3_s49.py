"""Arrow IPC objects that fail to open on S3 (s49): each named and kept on the first
error's ``others_failed``, as local files' and Parquet objects' are, not the first alone."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from s3util import BUCKET, S3Fixture
from s3util import store_options as options

from headrace.errors import FormatError
from headrace.formats import TableSource, table_token_files

pytestmark = pytest.mark.integration


def _ipc(file: bool) -> bytes:
    table = pa.table({"ids": [np.arange(k, dtype=np.int32) for k in range(1, 41)]})
    sink = pa.BufferOutputStream()
    with (pa.ipc.new_file if file else pa.ipc.new_stream)(sink, table.schema) as w:
        w.write_table(table, max_chunksize=10)
    return bytes(sink.getvalue())


def _damaged(s3: S3Fixture, prefix: str) -> str:
    """5 Arrow IPC objects under ``prefix``, 3 of them damaged (1, 2 and 4)."""
    client = s3.server.info.boto3_client()
    stream, file = _ipc(False), _ipc(True)
    bodies = {0: stream, 1: file[:-20], 2: b"tiny", 3: file, 4: b"PAR1" + stream[4:]}
    for i, body in bodies.items():
        client.put_object(Bucket=BUCKET, Key=f"{prefix}/p{i}.arrow", Body=body)
    return f"s3://{BUCKET}/{prefix}"


def _check(got: pytest.ExceptionInfo[FormatError], url: str) -> None:
    assert str(got.value).startswith(f"{url}/p1.arrow: truncated or corrupt Arrow IPC file")
    others = got.value.others_failed  # type: ignore[attr-defined]
    assert [str(e).split(": ")[0] for e in others] == [f"{url}/p2.arrow", f"{url}/p4.arrow"]
    assert "4 bytes is too small" in str(others[0])
    assert "a Parquet file (it starts with PAR1)" in str(others[1])


def test_every_damaged_arrow_object_is_named(s3: S3Fixture) -> None:
    url = _damaged(s3, "s49-arrow-open")
    with pytest.raises(FormatError, match=r"2 other files of the table failed to open") as got:
        TableSource(url, store_options=options(s3), columns=["ids"])
    _check(got, url)


def test_every_damaged_arrow_object_is_named_when_packing(s3: S3Fixture) -> None:
    url = _damaged(s3, "s49-arrow-pack")
    with pytest.raises(FormatError, match=r"2 other files of the table failed to open") as got:
        table_token_files(url, "ids", store_options=options(s3))
    _check(got, url)


def test_one_damaged_object_is_raised_alone(s3: S3Fixture) -> None:
    client = s3.server.info.boto3_client()
    client.put_object(Bucket=BUCKET, Key="s49-arrow-one/p0.arrow", Body=_ipc(False))
    client.put_object(Bucket=BUCKET, Key="s49-arrow-one/p1.arrow", Body=b"tiny")
    url = f"s3://{BUCKET}/s49-arrow-one"
    with pytest.raises(FormatError, match=r"p1.arrow: 4 bytes is too small") as got:
        TableSource(url, store_options=options(s3), columns=["ids"])
    assert got.value.others_failed == []  # type: ignore[attr-defined]
    assert not getattr(got.value, "__notes__", [])


def test_check_json_lists_each_damaged_arrow_object(s3: S3Fixture, tmp_path: Path) -> None:
    from headrace.cli import main

    url = _damaged(s3, "s49-arrow-check")
    info = s3.server.info
    opts = [f"endpoint={info.endpoint}", f"region={info.region}", "path_style=true"]
    opts += [f"access_key_id={info.access_key_id}", f"secret_access_key={info.secret_access_key}"]
    flags = [x for o in opts for x in ("--store-option", o)]
    out = tmp_path / "r.json"
    argv = ["check", url, "--format", "table", "--columns", "ids", "--json", str(out)]
    assert main([*argv, *flags]) == 2
    problems = json.loads(out.read_text())["problems"]
    named = [str(p["message"]).split(": ")[0] for p in problems]
    assert named == [f"{url}/p{i}.arrow" for i in (1, 2, 4)]
    assert {p["error"] for p in problems} == {"FormatError"}
