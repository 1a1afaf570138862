"""A folder of Arrow IPC files named .feather, .arrows or .ipc (what pyarrow.feather
and Polars write): opened as a folder of .arrow files is, locally and over a file://
URL alike; beside Parquet files, refused as .arrow beside .parquet is, not left out."""

from __future__ import annotations

from pathlib import Path

import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
feather = pytest.importorskip("pyarrow.feather")

from headrace.errors import ConfigError  # noqa: E402
from headrace.formats import Table  # noqa: E402


def _ipc(path: Path, rows: list[int]) -> None:
    table = pa.table({"x": rows})
    if path.suffix == ".feather":
        feather.write_feather(table, path)
        return
    with pa.OSFile(str(path), "wb") as f, pa.ipc.new_stream(f, table.schema) as w:
        w.write_table(table)


@pytest.mark.parametrize("suffix", [".feather", ".arrows", ".ipc"])
@pytest.mark.parametrize("remote", [False, True])  # (a file:// URL: listed as a prefix)
def test_a_folder_of_ipc_files_of_another_suffix_is_read(
    tmp_path: Path, suffix: str, remote: bool
) -> None:
    # Before: "empty dataset: no .arrow or .parquet files, no state.json".
    _ipc(tmp_path / f"b{suffix}", [4, 5])
    _ipc(tmp_path / f"a{suffix}", [1, 2, 3])
    with Table.open(tmp_path.as_uri() if remote else str(tmp_path)) as table:
        assert table.read_rows(list(range(5)))["x"].tolist() == [1, 2, 3, 4, 5]


@pytest.mark.parametrize("remote", [False, True])
def test_an_ipc_file_beside_parquet_files_is_not_left_out(tmp_path: Path, remote: bool) -> None:
    # Before: the table read b.parquet's 2 rows; a.feather's 3 left out without a word.
    _ipc(tmp_path / "a.feather", [1, 2, 3])
    pq.write_table(pa.table({"x": [4, 5]}), tmp_path / "b.parquet")
    with pytest.raises(
        ConfigError,
        match=r"holds both .arrow and .parquet files \(Arrow IPC a.feather beside b.parquet",
    ):
        Table.open(tmp_path.as_uri() if remote else str(tmp_path))
