"""Files of one Parquet table whose schemas differ the way a growing dataset's do: a
column added in later files (schema evolution), or token lists written as
``large_list<int64>`` by one writer and ``list<int32>`` by another. Each refusal says
which file lacks or has which column, and the types as the files store them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from headrace.errors import FormatError
from headrace.formats import TableSource


def _files(tmp_path: Path) -> tuple[str, str]:
    """``old.parquet`` (id, tokens) and ``new.parquet``, which adds ``score``."""
    ids = pa.array([[1, 2], [3]], pa.list_(pa.int32()))
    old = pa.table({"id": np.arange(2), "tokens": ids})
    new = old.append_column("score", pa.array([0.5, 0.25]))
    pq.write_table(old, tmp_path / "old.parquet")
    pq.write_table(new, tmp_path / "new.parquet")
    return str(tmp_path / "old.parquet"), str(tmp_path / "new.parquet")


@pytest.mark.parametrize("url", [False, True], ids=["local", "file-url"])
def test_a_later_file_without_a_column_the_first_has_is_named(tmp_path: Path, url: bool) -> None:
    # Before: "(columns [] not in the first file, ['score'] missing)", then an empty
    # schema beside "score: double".
    old, new = _files(tmp_path)
    files = [f"file://{p}" if url else p for p in (new, old)]
    with pytest.raises(
        FormatError,
        match=r"old\.parquet: schema differs from .*new\.parquet \(it lacks column 'score' "
        r"\(double in the first file\)\); .*leave it out .*or write it into every file",
    ):
        TableSource(files, columns=["id", "score"])
    TableSource(files, columns=["id", "tokens"], width=4).close()  # the others read


def test_a_later_file_with_a_column_the_first_lacks_is_named(tmp_path: Path) -> None:
    # Before: "(columns ['score'] not in the first file, [] missing)".
    old, new = _files(tmp_path)
    with pytest.raises(
        FormatError,
        match=r"new\.parquet: schema differs from .*old\.parquet \(it has column 'score' "
        r"\(double\), which the first file lacks\); .*leave it out \(columns=\[\.\.\.\] "
        r"names those read\), or write it into every file",
    ):
        TableSource([old, new], width=4)


def test_a_value_type_is_named_as_the_files_store_it(tmp_path: Path) -> None:
    # Before: "column 'tokens' is list<item: int32> here, list<item: int64> there"
    # for a file whose tokens are large_list<int64>: the offsets' width, which may
    # differ, was dropped from the type shown.
    lists = [[1, 2], [3]]
    pq.write_table(
        pa.table({"tokens": pa.array(lists, pa.large_list(pa.int64()))}), tmp_path / "a.parquet"
    )
    pq.write_table(
        pa.table({"tokens": pa.array(lists, pa.list_(pa.int32()))}), tmp_path / "b.parquet"
    )
    with pytest.raises(
        FormatError,
        match=r"b\.parquet: schema differs .*\(column 'tokens' is list<element: int32> here, "
        r"large_list<element: int64> there\)",
    ):
        TableSource(str(tmp_path), width=4)
