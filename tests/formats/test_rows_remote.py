"""Row files read through the object-store path (``file://`` URLs: obstore's local store).

The S3 endpoint tests are in tests/integration/test_rows_s3.py; these cover
how rows become ranges everywhere: consecutive whole rows as one range, a
prefix of each row as a range of its own, large ranges cut into pieces.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from headrace.errors import ConfigError
from headrace.formats import PaddedRows, _object_files, _row_file, open_row_file, write_row_file
from headrace.formats._row_file import RowReader


@pytest.fixture
def rows(tmp_path: Path) -> tuple[Path, np.ndarray]:
    data = np.arange(50 * 12, dtype=np.int32).reshape(50, 12)
    write_row_file(tmp_path / "r.npy", data)
    return tmp_path / "r.npy", data


@pytest.mark.parametrize(
    ("want", "cols", "gets"),
    [
        ([3, 4, 5, 6, 20, 21, 7], None, 3),  # runs 3-6, 20-21, 7
        ([5, 5, 6], None, 2),  # a repeated row starts a new run
        ([3, 4, 5], 7, 3),  # a prefix of each row: one range per row
        ([], None, 0),
    ],
)
def test_rows_become_ranges(
    rows: tuple[Path, np.ndarray], want: list[int], cols: int | None, gets: int
) -> None:
    path, data = rows
    f = open_row_file(f"file://{path}")
    io = RowReader()
    got = io.read(f, np.array(want, dtype=np.int64), cols)
    width = 12 if cols is None else cols
    assert np.array_equal(got, data[want][:, :width].reshape(len(want), width))
    stats = io.object_stats
    assert (stats.requests if stats is not None else 0) == gets
    io.close()


def test_large_ranges_are_cut_into_pieces(
    rows: tuple[Path, np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, data = rows
    monkeypatch.setattr(_object_files, "PIECE", 100)  # bytes: a 48-byte row, 2 rows a piece
    f = open_row_file(f"file://{path}")
    io = RowReader()
    got = io.read(f, np.arange(10, 20, dtype=np.int64))  # 480 bytes: 5 pieces
    assert np.array_equal(got, data[10:20])
    assert io.object_stats is not None and io.object_stats.requests == 5
    io.close()


def test_one_get_opens_an_npy_file_and_a_long_header_takes_two(
    rows: tuple[Path, np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, _ = rows
    want = open_row_file(path)
    for first, gets in ((_row_file._FIRST, 1), (16, 2)):  # 16 bytes: half the magic and size
        monkeypatch.setattr(_row_file, "_FIRST", first)
        io = RowReader()
        f = io.open(f"file://{path}")
        assert (f.dtype, f.rows, f.width, f.offset, f.format) == (
            want.dtype,
            want.rows,
            want.width,
            want.offset,
            want.format,
        )
        assert f.etag and io.object_stats is not None and io.object_stats.requests == gets
        io.close()


def test_a_row_source_that_fails_to_open_closes_its_stores(
    rows: tuple[Path, np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, _ = rows
    monkeypatch.setattr(_row_file, "_FIRST", 16)  # the header's second read starts the queue

    def queues() -> set[threading.Thread]:
        return {t for t in threading.enumerate() if t.name == "headrace-rows"}

    before = queues()
    with pytest.raises(ConfigError, match=r"r\.npy: stored width 12 is smaller than context"):
        PaddedRows(f"file://{path}", context=64)
    assert queues() == before


def test_store_options_are_checked(rows: tuple[Path, np.ndarray]) -> None:
    path, _ = rows
    with pytest.raises(ConfigError, match=r"unknown store_options \['regoin'\]; ObjectStore takes"):
        PaddedRows(f"file://{path}", context=8, store_options={"regoin": "x"})
    with pytest.raises(ConfigError, match=r"store_options must be a mapping .*\(got list\)"):
        PaddedRows(f"file://{path}", context=8, store_options=[("region", "x")])  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"r\.npy: store_options apply to object-store URLs"):
        PaddedRows(path, context=8, store_options={"region": "x"})
    with pytest.raises(ConfigError, match=r"in_flight must be an integer >= 1 \(got True\)"):
        PaddedRows(f"file://{path}", context=8, in_flight=True)
