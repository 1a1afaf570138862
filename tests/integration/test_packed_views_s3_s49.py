"""A list_view column packed from S3 (s49): the same stream as the local file's where the
object index knows a list view's buffers (``_arrow_format._buffer_counts``), else a clear
refusal naming the column (it said "record batch 0 is compressed")."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from s3util import BUCKET, S3Fixture
from s3util import store_options as options

from headrace.errors import ConfigError, FormatError
from headrace.formats import TokenSource, table_token_files
from headrace.formats._arrow_format import _buffer_counts

pytestmark = pytest.mark.integration

URL = f"s3://{BUCKET}/packed-views-s49"
KNOWN = _buffer_counts(pa, pa.list_view(pa.int32())) is not None


def _views(offsets: list[int], sizes: list[int], n: int) -> pa.Array:
    values = pa.array(np.arange(100, 100 + n, dtype=np.int32))
    return pa.ListViewArray.from_arrays(
        pa.array(offsets, pa.int32()), pa.array(sizes, pa.int32()), values
    )


def _put(s3: S3Fixture, tmp_path: Path, name: str, batches: list[pa.Array]) -> Path:
    sink = pa.BufferOutputStream()
    first = pa.record_batch({"label": np.arange(len(batches[0])), "input_ids": batches[0]})
    with pa.ipc.new_file(sink, first.schema) as w:
        for arr in batches:
            w.write_batch(pa.record_batch({"label": np.arange(len(arr)), "input_ids": arr}))
    body = bytes(sink.getvalue())
    s3.server.info.boto3_client().put_object(
        Bucket=BUCKET, Key=f"packed-views-s49/{name}", Body=body
    )
    (tmp_path / name).write_bytes(body)
    return tmp_path / name


def test_views_on_s3_are_the_local_stream(s3: S3Fixture, tmp_path: Path) -> None:
    local = _put(
        s3,
        tmp_path,
        "v.arrow",
        [_views([6, 0, 3, 2, 9, 7], [4, 3, 3, 3, 0, 2], 10), _views([1, 0], [2, 5], 8)],
    )
    (lf,) = table_token_files(local)
    if not KNOWN:
        with pytest.raises(ConfigError, match=r"v\.arrow: column\(s\) 'input_ids' have a layout"):
            table_token_files(f"{URL}/v.arrow", store_options=options(s3))
        return
    (rf,) = table_token_files(f"{URL}/v.arrow", store_options=options(s3))
    assert rf.num_tokens == lf.num_tokens == 22
    assert lf.bounds is not None and rf.bounds is not None
    assert rf.bounds.tolist() == lf.bounds.tolist() == [0, 4, 7, 10, 13, 13, 15, 17, 22]
    kw = {"context": 5, "window_bytes": 4096, "block_bytes": 4096, "positions": "documents"}
    a = TokenSource([lf], **kw)  # type: ignore[arg-type]
    b = TokenSource([rf], store_options=options(s3), **kw)  # type: ignore[arg-type]
    samples = np.arange(a.samples_per_epoch, dtype=np.int64)
    got_a, got_b = a.read(0, samples), b.read(0, samples)
    for key in ("x", "y", "position_ids"):
        assert np.array_equal(got_a[key], got_b[key]), key
    want = np.array([106, 107, 108, 109, 100, 101, 102, 103, 104, 105, 102, 103, 104])
    _, at = a.starts(0, samples)
    head = at < want.size - 5
    assert np.array_equal(got_a["x"][head], want[at[head, None] + np.arange(5)])
    a.close()
    b.close()


def test_a_view_row_past_its_values_on_s3_is_refused_as_locally(
    s3: S3Fixture, tmp_path: Path
) -> None:
    local = _put(s3, tmp_path, "d.arrow", [_views([0, 2, 4], [2, 2, 2], 6)])
    raw = bytearray(local.read_bytes())
    sizes = np.array([2, 2, 2], np.int32).tobytes()
    at = raw.find(sizes)
    raw[at + 8 : at + 12] = np.int32(50).tobytes()
    s3.server.info.boto3_client().put_object(
        Bucket=BUCKET, Key="packed-views-s49/d.arrow", Body=bytes(raw)
    )
    said = r"d\.arrow: column 'input_ids''s row 2 .*\[4, 54\)"
    with pytest.raises(FormatError if KNOWN else ConfigError, match=said if KNOWN else "layout"):
        table_token_files(f"{URL}/d.arrow", store_options=options(s3))
