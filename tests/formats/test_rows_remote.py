"""Row files read through the object-store path (``file://`` URLs: obstore's local store).

The S3 endpoint tests are in tests/integration/test_rows_s3.py; these cover
how rows become ranges everywhere: consecutive whole rows as one range, a
prefix of each row as a range of its own, large ranges cut into pieces.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from headrace.formats import _object_files, open_row_file, write_row_file
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
