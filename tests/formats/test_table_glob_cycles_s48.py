"""A table opened by a recursive glob (``**``) that passes a symbolic link to a folder
above it: refused naming the link, as a FileSource's and a token source's pattern is,
rather than each file read once per pass round the loop (41 times)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from headrace.errors import ConfigError  # noqa: E402
from headrace.formats import Table  # noqa: E402


def _folder(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    pq.write_table(pa.table({"x": [1, 2, 3]}), data / "a.parquet")
    pq.write_table(pa.table({"x": [4, 5]}), data / "sub" / "b.parquet")
    os.symlink(data, data / "sub" / "up")  # a link to the folder above it
    return data


@pytest.mark.parametrize("as_list", [False, True])
def test_a_recursive_glob_round_a_link_above_is_refused(tmp_path: Path, as_list: bool) -> None:
    data = _folder(tmp_path)
    pattern = str(data / "**" / "*.parquet")
    # Before: 5 rows read as 5 * 41 + ... (each file once per pass round the loop).
    with pytest.raises(ConfigError, match=r"sub/up: a symbolic link to .*a folder above it"):
        Table.open([pattern] if as_list else pattern)


def test_a_link_to_a_folder_beside_is_read_once_through_each_spelling(tmp_path: Path) -> None:
    data = _folder(tmp_path)
    os.remove(data / "sub" / "up")
    other = tmp_path / "other"
    other.mkdir()
    pq.write_table(pa.table({"x": [6]}), other / "c.parquet")
    os.symlink(other, data / "side")  # not above: no loop
    with Table.open(str(data / "**" / "*.parquet")) as table:
        assert table.num_rows == 6
