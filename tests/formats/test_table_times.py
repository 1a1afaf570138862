"""Timestamps, dates, durations and times of day in tables: NumPy's datetime64 /
timedelta64 of the column's unit, as pyarrow's ``to_numpy`` gives them (a time of day as
the time since midnight; the audit's battery reads ms, us and ns timestamps, date32,
durations and times of day in every file kind; these are the rest)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from _table_battery import write_arrow
from headrace.errors import FormatError
from headrace.formats import TableSource

N = 30


def _table() -> pa.Table:
    days = np.arange(-N // 2, N - N // 2) * 40_000
    return pa.table(
        {
            "day64": pa.array(days.astype("M8[D]").astype("M8[ms]"), pa.date64()),
            "ts_s": pa.array((days * 86_400).astype("M8[s]"), pa.timestamp("s", tz="+05:30")),
            "dur_ns": pa.array(days.astype("m8[ns]"), pa.duration("ns")),
            "i": np.arange(N),
        }
    )


@pytest.mark.parametrize("stream", [False, True])
def test_arrow_dates_and_seconds_read_as_pyarrow_reads_them(tmp_path: Path, stream: bool) -> None:
    table = _table()
    path = write_arrow(tmp_path / "t.arrow", table, [7, 0, 11], stream=stream)
    src = TableSource(str(path), shuffle="full")
    rows = np.arange(N, dtype=np.int64)
    got = src.read(0, rows)
    order = got["i"]
    for name in ("day64", "ts_s", "dur_ns"):
        want = table.column(name).to_numpy()[order]
        assert got[name].dtype == want.dtype and np.array_equal(got[name], want), name
    assert got["day64"].dtype == np.dtype("M8[ms]") and got["ts_s"].dtype == np.dtype("M8[s]")
    src.close()


def test_null_times_are_refused_by_row(tmp_path: Path) -> None:
    values = pa.array([0, None, 5], pa.timestamp("us"))
    pq.write_table(pa.table({"t": values}), tmp_path / "n.parquet")
    with pytest.raises(FormatError, match="column 't': row 1 is null"):  # at open: local
        TableSource(str(tmp_path / "n.parquet"), shuffle="none")


@pytest.mark.parametrize("kind", ["parquet", "arrow"])
def test_a_time_of_day_is_the_time_since_midnight(tmp_path: Path, kind: str) -> None:
    # timedelta64 of the unit as stored (refused until 2026-12-04): a Parquet file
    # holds a time32[s] as ms, an Arrow file as s; 32-bit values widened to NumPy's 64.
    seconds = np.array([0, 1, 43_200, 86_399], np.int32)
    table = pa.table({"at": pa.array(seconds, pa.time32("s")), "i": np.arange(4)})
    path = tmp_path / f"t.{kind}"
    if kind == "parquet":
        pq.write_table(table, path)
    else:
        write_arrow(path, table, [3, 1])
    src = TableSource(str(path), shuffle="none")
    got = src.read(0, np.arange(4, dtype=np.int64))
    unit = "ms" if kind == "parquet" else "s"
    assert got["at"].dtype == np.dtype(f"m8[{unit}]")
    assert np.array_equal(got["at"], seconds.astype("m8[s]"))  # equal across units
    assert str(got["at"][3].astype("m8[s]")) == "86399 seconds"
    src.close()
