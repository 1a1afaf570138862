"""Tables of Parquet INT96 timestamps (Spark's, Impala's), lists of timestamps, list
views, and the other types a table's columns may hold, read from real files."""

from __future__ import annotations

import datetime as dt
import decimal
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from headrace.errors import ConfigError, FormatError
from headrace.formats import TableSource

ALL = np.arange(3, dtype=np.int64)


def _read(path: Path, rows: np.ndarray = ALL, **kw: object) -> dict[str, object]:
    src = TableSource(str(path), shuffle="none", **kw)  # type: ignore[arg-type]
    try:
        return dict(src.read(0, rows))
    finally:
        src.close()


def _when(*days: str) -> np.ndarray:
    return np.array(days, dtype="M8[us]")


@pytest.mark.parametrize("group", [3, 1])
def test_int96_timestamps_past_the_nanosecond_range_read_as_written(
    tmp_path: Path, group: int
) -> None:
    # Spark's and Impala's end-of-time sentinels (9999-12-31) and dates before 1677
    # wrapped around as nanoseconds: 1500-01-01 came back as 2084-07-20, silently.
    when = _when("1500-01-01", "2020-01-01T12:34:56.789012", "9999-12-31T23:59:59")
    table = pa.table({"t": pa.array(when, pa.timestamp("us")), "i": np.arange(3)})
    path = tmp_path / "int96.parquet"
    pq.write_table(table, path, use_deprecated_int96_timestamps=True, row_group_size=group)
    assert pq.ParquetFile(path).metadata.row_group(0).column(0).physical_type == "INT96"
    got = _read(path)
    assert got["t"].dtype == np.dtype("M8[us]")  # Spark's unit, as Spark reads them
    assert np.array_equal(got["t"], when)


def test_int96_timestamps_read_in_sub_windows_of_a_big_row_group(tmp_path: Path) -> None:
    when = np.array(["1400-02-03", "2999-01-01", "1970-01-01", "9999-12-31"] * 3, "M8[us]")
    table = pa.table({"t": pa.array(when, pa.timestamp("us")), "i": np.arange(12)})
    path = tmp_path / "big.parquet"
    pq.write_table(table, path, use_deprecated_int96_timestamps=True)  # one group of 12
    src = TableSource(str(path), window_rows=4)
    got = src.read(0, np.arange(8, 12, dtype=np.int64))
    assert src.table.skipped_rows > 0  # streamed: rows 0 to 7 decoded and dropped
    assert sorted(got["i"].tolist()) == [8, 9, 10, 11]
    assert np.array_equal(got["t"], when[got["i"]])
    src.close()


def _times_table() -> pa.Table:
    day = dt.datetime(2024, 5, 1, 12, 30)
    return pa.table(
        {
            "at": pa.array(
                [[day], [], [day, day + dt.timedelta(hours=1)]], pa.list_(pa.timestamp("ms"))
            ),
            "on": pa.array([[1, 2], [3], []], pa.large_list(pa.date32())),
            "took": pa.array([[5], [6, 7, 8], [9]], pa.list_(pa.duration("us"))),
            "pair": pa.array([[0, 1], [2, 3], [4, 5]], pa.list_(pa.timestamp("s", tz="UTC"), 2)),
            "i": np.arange(3),
        }
    )


@pytest.mark.parametrize("kind", ["parquet", "arrow"])
def test_lists_of_timestamps_read_as_datetime64_padded_like_other_lists(
    tmp_path: Path, kind: str
) -> None:
    table = _times_table()
    path = tmp_path / f"times.{kind}"
    if kind == "parquet":
        pq.write_table(table, path)
    else:
        with pa.ipc.new_file(str(path), table.schema) as w:
            w.write_table(table, max_chunksize=2)
    got = _read(path, np.array([2, 0, 1], np.int64), width=3)
    at = table.column("at").to_pylist()
    assert got["at"].dtype == np.dtype("M8[ms]")
    assert got["at"][0, :2].tolist() == at[2] and got["at"][1, :1].tolist() == at[0]
    assert got["at_mask"].tolist() == [[True, True, False], [True, False, False], [False] * 3]
    assert got["at"][2].view(np.int64).tolist() == [0, 0, 0]  # padded with 0 counts
    assert got["on"].dtype == np.dtype("M8[D]")
    assert got["on"][1].view(np.int64).tolist() == [1, 2, 0]
    assert got["took"].dtype == np.dtype("m8[us]")
    assert got["took"][2].view(np.int64).tolist() == [6, 7, 8]
    unit = "ms" if kind == "parquet" else "s"  # Parquet has no seconds: pyarrow writes ms
    assert got["pair"].dtype == np.dtype(f"M8[{unit}]") and got["pair"].shape == (3, 2)
    assert got["pair"].astype("M8[s]").view(np.int64).tolist() == [[4, 5], [0, 1], [2, 3]]


def test_lists_of_timestamps_pad_with_nat_as_a_count(tmp_path: Path) -> None:
    pq.write_table(_times_table(), tmp_path / "t.parquet")
    nat = np.iinfo(np.int64).min
    got = _read(tmp_path / "t.parquet", width=2, truncate=True, pad_values={"at": nat})
    assert np.isnat(got["at"][1]).all() and not np.isnat(got["at"][2]).any()
    with pytest.raises(ConfigError, match=r"pad_value 0\.5 does not fit dtype int64"):
        _read(tmp_path / "t.parquet", width=2, truncate=True, pad_values={"at": 0.5})


def test_a_null_timestamp_in_a_list_is_refused_by_row(tmp_path: Path) -> None:
    values = pa.array([[0], [1, None], []], pa.list_(pa.timestamp("us")))
    pq.write_table(pa.table({"t": values}), tmp_path / "n.parquet")
    with pytest.raises(FormatError, match=r"column 't': 1 row\(s\) hold null list items.*rows 1"):
        _read(tmp_path / "n.parquet", width=2)


def _views() -> pa.Table:
    # Views out of order and overlapping: rows [3, 4], [1, 2], [2, 3], [].
    ids = pa.ListViewArray.from_arrays(
        pa.array([2, 0, 1, 0], pa.int32()),
        pa.array([2, 2, 2, 0], pa.int32()),
        pa.array([1, 2, 3, 4]),
    )
    scores = pa.LargeListViewArray.from_arrays(
        pa.array([3, 0, 1, 0], pa.int64()),
        pa.array([1, 4, 2, 0], pa.int64()),
        pa.array([1, 2, 3, 4], pa.float32()),
    )
    return pa.table({"ids": ids, "scores": scores, "i": np.arange(4)})


def _write_ipc(path: Path, table: pa.Table, *, stream: bool = False, chunk: int = 3) -> Path:
    new = pa.ipc.new_stream if stream else pa.ipc.new_file
    with new(str(path), table.schema) as w:
        w.write_table(table, max_chunksize=chunk)
    return path


@pytest.mark.parametrize("stream", [False, True])
def test_list_views_read_as_the_lists_they_hold(tmp_path: Path, stream: bool) -> None:
    # Refused until now ("cannot turn into arrays"); pyarrow's own cast to a list
    # builds an invalid array from these views, so they are not cast.
    path = _write_ipc(tmp_path / "v.arrow", _views(), stream=stream)
    got = _read(path, np.array([3, 2, 1, 0], np.int64), width=4)
    assert got["ids"][:, :2].tolist() == [[0, 0], [2, 3], [1, 2], [3, 4]]
    assert got["ids_mask"].sum(axis=1).tolist() == [0, 2, 2, 2]
    assert got["scores"].dtype == np.float32
    assert got["scores"].tolist() == [[0] * 4, [2, 3, 0, 0], [1, 2, 3, 4], [4, 0, 0, 0]]


def test_list_views_beside_lists_in_other_shards_are_one_table(tmp_path: Path) -> None:
    views = _views().select(["ids", "i"])
    plain = pa.table({"ids": pa.array([[7], [8, 9]]), "i": np.arange(4, 6)})
    _write_ipc(tmp_path / "a.arrow", views)
    _write_ipc(tmp_path / "b.arrow", plain)
    src = TableSource(
        [str(tmp_path / "a.arrow"), str(tmp_path / "b.arrow")], shuffle="none", width=2
    )
    got = src.read(0, np.arange(6, dtype=np.int64))
    assert got["ids"].tolist() == [[3, 4], [1, 2], [2, 3], [0, 0], [7, 0], [8, 9]]
    src.close()


def test_list_views_of_lists_read_with_shapes(tmp_path: Path) -> None:
    inner = pa.array([[1, 2], [3, 4], [5, 6]], pa.list_(pa.int16()))
    boxes = pa.ListViewArray.from_arrays(
        pa.array([1, 0], pa.int32()), pa.array([2, 1], pa.int32()), inner
    )
    path = _write_ipc(tmp_path / "b.arrow", pa.table({"boxes": boxes}))
    got = _read(path, np.arange(2, dtype=np.int64), shapes={"boxes": (None, 2)}, width=2)
    assert got["boxes"].tolist() == [[[3, 4], [5, 6]], [[1, 2], [0, 0]]]


def test_null_rows_and_items_of_list_views_are_refused_by_row(tmp_path: Path) -> None:
    values = pa.array([1, None, 3])
    rows = pa.ListViewArray.from_arrays(
        pa.array([2, 0, 0], pa.int32()), pa.array([1, 2, 0], pa.int32()), values
    )
    path = _write_ipc(tmp_path / "n.arrow", pa.table({"v": rows}))
    with pytest.raises(FormatError, match=r"column 'v': 1 row\(s\) hold null list items.*rows 1"):
        TableSource(str(path), shuffle="none", width=2)
    null = pa.ListViewArray.from_arrays(
        pa.array([0, 0], pa.int32()),
        pa.array([1, 0], pa.int32()),
        pa.array([5]),
        mask=pa.array([False, True]),
    )
    path = _write_ipc(tmp_path / "m.arrow", pa.table({"v": null}))
    with pytest.raises(FormatError, match=r"column 'v': row 1 is null"):
        TableSource(str(path), shuffle="none", width=2)


def test_a_list_view_of_strings_is_refused_naming_how_it_is_stored(tmp_path: Path) -> None:
    words = pa.ListViewArray.from_arrays(
        pa.array([0], pa.int32()), pa.array([1], pa.int32()), pa.array(["a"])
    )
    path = _write_ipc(tmp_path / "s.arrow", pa.table({"w": words}))
    with pytest.raises(FormatError, match=r"column 'w' is stored as list_view<item: string>"):
        TableSource(str(path), shuffle="none")


def test_a_decimal_column_is_refused_saying_how_to_write_it_as_numbers(tmp_path: Path) -> None:
    prices = pa.array([decimal.Decimal("1.25"), decimal.Decimal("-3.50")], pa.decimal128(10, 2))
    pq.write_table(pa.table({"price": prices}), tmp_path / "d.parquet")
    with pytest.raises(FormatError, match=r"'price' to float64 .*multiplying by 10\*\*2"):
        TableSource(str(tmp_path / "d.parquet"), shuffle="none")
