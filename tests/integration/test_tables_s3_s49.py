"""Tables on S3 (moto on 127.0.0.1) read as local ones are: a dictionary column whose
dictionary holds a null is refused at open, INT96 timestamps read past 2262, lists of
timestamps and list views."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from s3util import BUCKET, S3Fixture
from s3util import store_options as options

from headrace.errors import FormatError
from headrace.formats import TableSource

pytestmark = pytest.mark.integration

URL = f"s3://{BUCKET}/tables-s49"


def _put(s3: S3Fixture, key: str, body: bytes) -> None:
    s3.server.info.boto3_client().put_object(Bucket=BUCKET, Key=f"tables-s49/{key}", Body=body)


def _ipc(table: pa.Table, *, stream: bool = False) -> bytes:
    sink = pa.BufferOutputStream()
    new = pa.ipc.new_stream if stream else pa.ipc.new_file
    with new(sink, table.schema) as w:
        w.write_table(table, max_chunksize=2)
    return sink.getvalue().to_pybytes()


@pytest.mark.parametrize("stream", [False, True])
def test_a_null_in_a_dictionary_is_refused_at_open_on_s3_as_locally(
    s3: S3Fixture, tmp_path: Path, stream: bool
) -> None:
    labels = pa.DictionaryArray.from_arrays(
        pa.array([0, 1, 0, 2, 0], pa.int8()), pa.array([10, 20, None], pa.int64())
    )
    body = _ipc(pa.table({"label": labels, "i": np.arange(5)}), stream=stream)
    (tmp_path / "d.arrow").write_bytes(body)
    _put(s3, f"d{stream}.arrow", body)
    for where, kw in (
        (str(tmp_path / "d.arrow"), {}),
        (f"{URL}/d{stream}.arrow", {"store_options": options(s3)}),
    ):
        with pytest.raises(FormatError, match=r"d\w*\.arrow: column 'label': row 3 is null"):
            TableSource(where, shuffle="none", **kw)  # type: ignore[arg-type]
        src = TableSource(where, shuffle="none", columns=["i"], **kw)  # type: ignore[arg-type]
        assert src.read(0, np.arange(5, dtype=np.int64))["i"].tolist() == [0, 1, 2, 3, 4]
        src.close()


def test_int96_times_lists_of_times_and_list_views_read_on_s3_as_locally(
    s3: S3Fixture, tmp_path: Path
) -> None:
    when = np.array(
        ["1500-01-01", "2020-01-01T12:00:00.000001", "9999-12-31", "1969-07-20"], "M8[us]"
    )
    times = pa.array([[0, 1], [], [2], [3, 4, 5]], pa.list_(pa.timestamp("ms")))
    ids = pa.ListViewArray.from_arrays(
        pa.array([2, 0, 1, 0], pa.int32()),
        pa.array([2, 2, 2, 1], pa.int32()),
        pa.array([1, 2, 3, 4]),
    )
    rows = np.array([3, 0, 2, 1], np.int64)
    flat = pa.table({"t": pa.array(when, pa.timestamp("us")), "times": times, "i": np.arange(4)})
    sink = pa.BufferOutputStream()
    pq.write_table(flat, sink, use_deprecated_int96_timestamps=True, row_group_size=3)
    bodies = {"t.parquet": sink.getvalue().to_pybytes()}
    viewed = pa.table({"times": times, "ids": ids, "i": np.arange(4)})
    bodies["v.arrow"] = _ipc(viewed)
    bodies["vs.arrow"] = _ipc(viewed, stream=True)
    for name, body in bodies.items():
        (tmp_path / name).write_bytes(body)
        _put(s3, name, body)
        got = []
        for where, kw in (
            (str(tmp_path / name), {}),
            (f"{URL}/{name}", {"store_options": options(s3)}),
        ):
            src = TableSource(where, shuffle="none", width=3, truncate=True, **kw)  # type: ignore[arg-type]
            got.append(src.read(0, rows))
            src.close()
        local, remote = got
        assert local.keys() == remote.keys(), name
        for c in local:
            assert local[c].dtype == remote[c].dtype and np.array_equal(local[c], remote[c]), (
                name,
                c,
            )
        # (pyarrow writes every timestamp of the file as INT96, those in lists too)
        unit = "us" if name.endswith("parquet") else "ms"
        assert local["times"].dtype == np.dtype(f"M8[{unit}]"), name
        assert local["times"][0].astype("M8[ms]").view(np.int64).tolist() == [3, 4, 5]
        if "t" in local:
            assert np.array_equal(local["t"], when[rows]), name
        if "ids" in local:
            assert local["ids"].tolist() == [[1, 0, 0], [3, 4, 0], [2, 3, 0], [1, 2, 0]], name
