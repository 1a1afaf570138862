"""Row and pair sources at their edges: arguments given as NumPy integers or bools, and
``write_row_file`` refusing what no reader would open before it touches the old file."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headrace.errors import ConfigError
from headrace.formats import PaddedRows, PairRows, open_row_file, write_row_file


def _source(kind: str, path: Path, **kw: Any) -> PaddedRows | PairRows:
    if kind == "padded":
        return PaddedRows(path, context=3, **kw)
    return PairRows({"anchor": path}, **kw)


@pytest.fixture
def rows(tmp_path: Path) -> Path:
    tok = np.arange(1, 41, dtype=np.uint16).reshape(10, 4)
    write_row_file(tmp_path / "t.npy", tok)
    return tmp_path / "t.npy"


@pytest.mark.parametrize("kind", ["padded", "pairs"])
def test_max_retries_a_bool_is_refused_a_numpy_integer_taken(rows: Path, kind: str) -> None:
    # True was taken as 1 retry, and its fingerprint held true, not 1.
    with pytest.raises(ConfigError, match=r"max_retries must be an integer >= 0 \(got True"):
        _source(kind, rows, max_retries=True)
    src = _source(kind, rows, max_retries=np.int64(3))  # a NumPy one was refused
    assert src.max_retries == 3 and type(src.max_retries) is int
    assert json.dumps(src.fingerprint())  # the state's JSON
    assert src.fingerprint() == _source(kind, rows, max_retries=3).fingerprint()


@pytest.mark.parametrize("kind", ["padded", "pairs"])
def test_window_rows_may_be_a_numpy_integer(rows: Path, kind: str) -> None:
    # Refused before, "must be an integer >= 1 (got np.int64(4))": it is one.
    src = _source(kind, rows, shuffle="window", window_rows=np.int64(4))
    plain = _source(kind, rows, shuffle="window", window_rows=4)
    assert src.window_rows == 4 and type(src.window_rows) is int
    assert json.dumps(src.fingerprint()) == json.dumps(plain.fingerprint())
    samples = np.arange(25, dtype=np.int64)
    a, b = src.read(5, samples), plain.read(5, samples)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    with pytest.raises(ConfigError, match=r"window_rows must be an integer >= 1 \(got True\)"):
        _source(kind, rows, shuffle="window", window_rows=True)


def test_a_tables_window_rows_may_be_a_numpy_integer(tmp_path: Path) -> None:
    # The same check serves tables (and MDS), which refused np.int64(4) too.
    pq = pytest.importorskip("pyarrow.parquet")
    pa = pytest.importorskip("pyarrow")
    from headrace.formats import TableSource

    pq.write_table(pa.table({"x": np.arange(40)}), tmp_path / "t.parquet", row_group_size=8)

    def source(n: object) -> TableSource:
        return TableSource(tmp_path / "t.parquet", shuffle="window", window_rows=n)

    src, plain = source(np.int64(4)), source(4)
    assert json.dumps(src.fingerprint()) == json.dumps(plain.fingerprint())
    samples = np.arange(20, dtype=np.int64)
    np.testing.assert_array_equal(src.read(5, samples)["x"], plain.read(5, samples)["x"])
    with pytest.raises(ConfigError, match=r"window_rows must be an integer >= 1 \(got True\)"):
        source(True)
    src.close()
    plain.close()


@pytest.mark.parametrize("name", ["r.npy", "r.bin"])
@pytest.mark.parametrize(
    ("bad", "says"),
    [
        (np.zeros((0, 4), np.uint16), r"0 rows"),
        (np.zeros((3, 0), np.uint16), r"rows of 0 columns"),
    ],
)
def test_write_row_file_refuses_empty_matrices_before_writing(
    tmp_path: Path, name: str, bad: np.ndarray, says: str
) -> None:
    # It wrote them over the old file, then refused to open what it had written.
    old = np.ones((4, 3), np.uint16)
    write_row_file(tmp_path / name, old)
    with pytest.raises(ConfigError, match=rf"{name}: .*{says}.*shape \(\d, \d\)"):
        write_row_file(tmp_path / name, bad)
    np.testing.assert_array_equal(
        np.load(tmp_path / name)
        if name.endswith(".npy")
        else np.fromfile(tmp_path / name, np.uint16).reshape(4, 3),
        old,
    )
    assert open_row_file(tmp_path / name).rows == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [name] + ([] if name.endswith(".npy") else [f"{name}.json"])
    )


@pytest.mark.parametrize("dtype", ["<U2", "complex64", "datetime64[s]"])
def test_write_row_file_refuses_raw_dtypes_a_sidecar_cannot_name(
    tmp_path: Path, dtype: str
) -> None:
    # A str array's sidecar said "str64", which no reader takes (the old file was gone).
    write_row_file(tmp_path / "r.bin", np.ones((2, 2), np.uint8))
    shown = re.escape(str(np.dtype(dtype)))
    with pytest.raises(ConfigError, match=rf"r\.bin: dtype {shown} cannot .*integer, bool or"):
        write_row_file(tmp_path / "r.bin", np.zeros((2, 2), dtype))
    assert open_row_file(tmp_path / "r.bin").dtype == np.uint8
