"""Packed token lists on S3 (moto): fixed-size lists and damaged row offsets as locally."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from s3util import BUCKET, S3Fixture
from s3util import store_options as options

from headrace.errors import ConfigError, FormatError
from headrace.formats import TokenSource, table_token_files

pytestmark = pytest.mark.integration

URL = f"s3://{BUCKET}/packed-s48"


def _stream(table: pa.Table, chunk: int) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table, max_chunksize=chunk)
    return bytes(sink.getvalue())


def _put(s3: S3Fixture, tmp_path: Path, name: str, body: bytes) -> Path:
    s3.server.info.boto3_client().put_object(Bucket=BUCKET, Key=f"packed-s48/{name}", Body=body)
    (tmp_path / name).write_bytes(body)
    return tmp_path / name


def test_fixed_size_lists_on_s3_are_the_local_stream(s3: S3Fixture, tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    ids = rng.integers(0, 2**31 - 1, (120, 6)).astype(np.int32)
    table = pa.table(
        {
            "label": np.arange(120),
            "input_ids": pa.array(list(ids), type=pa.list_(pa.int32(), 6)),
        }
    )
    local = _put(s3, tmp_path, "fixed.arrow", _stream(table, chunk=25))
    (lf,) = table_token_files(local)
    (rf,) = table_token_files(f"{URL}/fixed.arrow", store_options=options(s3))
    assert rf.num_tokens == lf.num_tokens == ids.size
    assert np.array_equal(rf.documents(), lf.documents())
    kw = {"context": 10, "window_bytes": 4096, "block_bytes": 4096, "positions": "documents"}
    a = TokenSource([lf], **kw)  # type: ignore[arg-type]
    b = TokenSource([rf], store_options=options(s3), **kw)  # type: ignore[arg-type]
    samples = np.arange(a.samples_per_epoch, dtype=np.int64)
    got, want = b.read(4, samples), a.read(4, samples)
    for k in ("x", "y", "position_ids"):
        assert np.array_equal(got[k], want[k])
    _, offsets = a.starts(4, samples)
    assert np.array_equal(want["x"], ids.reshape(-1)[offsets[:, None] + np.arange(10)])
    a.close()
    b.close()


def test_row_offsets_that_go_down_are_named_on_s3_as_locally(s3: S3Fixture, tmp_path: Path) -> None:
    even = pa.table({"input_ids": pa.array([[7, 8, 9]] * 100, pa.list_(pa.int32()))})
    body = bytearray(_stream(even, chunk=100))
    offsets = np.arange(0, 301, 3, dtype=np.int32)
    at = body.index(offsets.tobytes())
    offsets[50] = 290
    body[at : at + offsets.nbytes] = offsets.tobytes()
    local = _put(s3, tmp_path, "down.arrow", bytes(body))
    said = r"down\.arrow: column 'input_ids'.s row offsets go down in record batch 0: row 50 "
    with pytest.raises(FormatError, match=said):
        table_token_files(local)
    with pytest.raises(FormatError, match=said):
        table_token_files(f"{URL}/down.arrow", store_options=options(s3))


def test_a_batch_of_no_rows_without_offsets_is_read_alike(s3: S3Fixture, tmp_path: Path) -> None:
    typ = pa.list_(pa.int32())
    schema = pa.schema({"input_ids": typ})
    empty = pa.ListArray.from_buffers(typ, 0, [None, None], children=[pa.array([], pa.int32())])
    rows = pa.array([[1, 2, 3], [4], [5, 6]] * 10, typ)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as w:
        for col in (rows, empty, rows):
            w.write_batch(pa.record_batch([col], schema=schema))
    local = _put(s3, tmp_path, "empty.arrow", bytes(sink.getvalue()))
    (lf,) = table_token_files(local)
    (rf,) = table_token_files(f"{URL}/empty.arrow", store_options=options(s3))
    assert lf.num_tokens == rf.num_tokens == 120
    assert np.array_equal(lf.documents(), rf.documents())


def test_an_arrow_object_named_without_its_suffix_is_not_called_parquet(
    s3: S3Fixture, tmp_path: Path
) -> None:
    # An Arrow stream named part-0 (packed locally as it is) was refused on S3 as "a
    # Parquet file's pages are encoded": the fix it gave (an Arrow copy) was what it was.
    table = pa.table({"input_ids": pa.array([[1, 2, 3]] * 30, pa.list_(pa.int32()))})
    local = _put(s3, tmp_path, "part-0", _stream(table, chunk=30))
    assert table_token_files(local)[0].num_tokens == 90
    with pytest.raises(
        ConfigError, match=r"packed-s48/part-0: not named as an Arrow IPC file .*name it \.arrow"
    ) as ei:
        table_token_files([f"{URL}/part-0"], store_options=options(s3))
    assert "Parquet" not in str(ei.value)
