"""Timestamps, dates and durations in tables: NumPy's datetime64 / timedelta64 of the
column's unit, as pyarrow's ``to_numpy`` gives them (the audit's battery reads ms, us
and ns timestamps, date32 and durations in every file kind; these are the rest)."""

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


def test_a_time_of_day_is_still_refused_by_name(tmp_path: Path) -> None:
    pq.write_table(pa.table({"at": pa.array([1, 2], pa.time32("s"))}), tmp_path / "t.parquet")
    with pytest.raises(FormatError, match="column 'at' has type time32"):
        TableSource(str(tmp_path / "t.parquet"))
