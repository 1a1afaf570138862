"""A table's numbers taken from Arrow buffers (:func:`numbers`): what pyarrow's
``to_numpy`` gives, without the pandas import its first call cost a first batch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest

from headrace.formats._arrow_numpy import numbers

_TYPES = [
    pa.int8(),
    pa.int16(),
    pa.int32(),
    pa.int64(),
    pa.uint8(),
    pa.uint16(),
    pa.uint32(),
    pa.uint64(),
    pa.float16(),
    pa.float32(),
    pa.float64(),
]


@pytest.mark.parametrize("t", _TYPES, ids=str)
def test_numbers_are_to_numpy_for_every_width_and_offset(t: pa.DataType) -> None:
    values = np.arange(-20, 20).astype(t.to_pandas_dtype())
    arr = pa.array(values, type=t)
    for part in (arr, arr.slice(3), arr.slice(5, 11), arr.slice(40), arr.slice(7, 0)):
        got = numbers(part)
        want = part.to_numpy(zero_copy_only=False)
        assert got.dtype == want.dtype
        assert got.tobytes() == want.tobytes()
        assert not got.flags.writeable


def test_other_types_and_nulls_still_take_to_numpy() -> None:
    flags = pa.array([True, False, True]).slice(1)
    assert numbers(flags).tolist() == [False, True]
    assert numbers(pa.array(["a", "b"])).tolist() == ["a", "b"]
    with_null = pa.array([1, None, 3], pa.int32())
    assert np.array_equal(
        numbers(with_null), with_null.to_numpy(zero_copy_only=False), equal_nan=True
    )
    with pytest.raises(pa.ArrowInvalid):  # a copy where none is allowed, as before
        numbers(flags, zero_copy_only=True)


N = 50
TABLE = pa.table(
    {
        "id": pa.array(np.arange(N, dtype=np.int64) * 3),
        "h": pa.array(np.arange(N, dtype=np.float16) / 4),
        "u": pa.array(np.arange(N, dtype=np.uint8)),
        "tok": pa.array([list(range(i % 9)) for i in range(N)], pa.list_(pa.int32())),
        "v": pa.array([[i, i / 2, -i] for i in range(N)], pa.list_(pa.float64(), 3)),
        "s": pa.array([f"r{i}" for i in range(N)]),
        # Bools, and null rows (never the rows read): their spans' validity bitmaps,
        # and the values in their places, unpacked without pyarrow's to_numpy.
        "b": pa.array([i % 3 == 0 for i in range(N)]),
        "bn": pa.array([None if i % 10 == 5 else i % 4 == 1 for i in range(N)]),
        "n": pa.array([None if i % 10 == 5 else i - 20 for i in range(N)], pa.int64()),
        "tn": pa.array(
            [None if i % 10 == 5 else list(range(i % 5)) for i in range(N)], pa.list_(pa.int32())
        ),
    }
)

_FIRST_READ = """
import json, sys
from headrace.formats import Table
tb = Table.open(sys.argv[1])
got = tb.read_rows([int(r) for r in sys.argv[2].split(",")])
pandas = "pandas" in sys.modules
out = {c: (a.tolist() if hasattr(a, "tolist") else
           [a.values[a.offsets[i]:a.offsets[i + 1]].tolist() for i in range(len(a))])
       for c, a in got.items()}
print(json.dumps({"pandas": pandas, "rows": out}))
"""


@pytest.mark.parametrize("kind", ["parquet", "arrow-file", "arrow-stream"])
def test_a_first_read_imports_no_pandas_and_gives_pyarrows_rows(tmp_path: Path, kind: str) -> None:
    pytest.importorskip("pandas")  # where pandas is missing, nothing could import it
    path = tmp_path / ("t.parquet" if kind == "parquet" else "t.arrow")
    if kind == "parquet":
        pq.write_table(TABLE, path, row_group_size=16)
    else:
        with (ipc.new_stream if kind == "arrow-stream" else ipc.new_file)(path, TABLE.schema) as w:
            w.write_table(TABLE, max_chunksize=16)
    rows = [37, 2, 49, 16, 0, 17]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run(
        [sys.executable, "-c", _FIRST_READ, str(path), ",".join(map(str, rows))],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    got = json.loads(out.stdout)
    assert got["pandas"] is False
    for name in TABLE.column_names:
        want = TABLE.column(name).take(pa.array(rows)).to_pylist()
        if name == "s":
            want = [list(w.encode()) for w in want]
        assert got["rows"][name] == want, name
