"""A table's files are checked as a FileSource's are: a FIFO, socket or dangling symbolic
link named like a table file is refused by name in a glob, a list or as the one path,
and left out of a folder with a warning that counts it (docs/formats.md)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest

from headrace.errors import ConfigError, ObjectNotFoundError
from headrace.formats import TableSource


def _tables(root: Path, suffix: str, n: int = 2) -> list[Path]:
    root.mkdir(exist_ok=True)
    out = []
    for i in range(n):
        t = pa.table({"x": np.arange(3, dtype=np.int64) + 10 * i})
        path = root / f"{i}.{suffix}"
        if suffix == "parquet":
            pq.write_table(t, path)
        else:
            feather.write_feather(t, path, compression="uncompressed")
        out.append(path)
    return out


def _values(src: TableSource) -> list[int]:
    return [int(v) for v in src.read(0, np.arange(len(src)))["x"]]


@pytest.mark.timeout(60)  # before: opening a listed FIFO waited for a writer for ever
@pytest.mark.parametrize("suffix", ["parquet", "arrow"])
def test_a_fifo_in_a_glob_a_list_or_alone_is_refused_by_name(tmp_path: Path, suffix: str) -> None:
    # Fails before: a glob left the FIFO out without a word (2 files, 6 rows read as the
    # whole table); a list hung on opening it; alone, "no such file or directory".
    first, _ = _tables(tmp_path, suffix)
    fifo = tmp_path / f"2.{suffix}"
    os.mkfifo(fifo)
    said = rf"2\.{suffix}: a FIFO, not a regular file.*for ever.*leave it out"
    for path in (str(tmp_path / f"*.{suffix}"), [first, fifo], fifo):
        with pytest.raises(ConfigError, match=said):
            TableSource(path, columns=["x"])  # type: ignore[arg-type]


@pytest.mark.parametrize("suffix", ["parquet", "arrow"])
def test_a_dangling_link_in_a_glob_a_list_or_a_folder_is_refused_naming_its_target(
    tmp_path: Path, suffix: str
) -> None:
    # Fails before: a glob left it out without a word; a folder or list said only that
    # the file could not be opened, not that it is a link to a target that is gone.
    first, _ = _tables(tmp_path, suffix)
    link = tmp_path / f"2.{suffix}"
    os.symlink(tmp_path / "gone" / link.name, link)
    said = rf"2\.{suffix}: a symbolic link to .*gone.*remove the link or restore its target"
    for path in (str(tmp_path / f"*.{suffix}"), [first, link], tmp_path, link):
        with pytest.raises(ObjectNotFoundError, match=said):
            TableSource(path, columns=["x"])  # type: ignore[arg-type]


@pytest.mark.timeout(60)  # before: the folder's FIFO was opened, waiting for ever
def test_a_fifo_in_a_folder_is_left_out_and_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _tables(tmp_path, "parquet")
    os.mkfifo(tmp_path / "2.parquet")
    os.mkfifo(tmp_path / "notes.txt")  # not a table file's name: not counted
    with caplog.at_level("WARNING", logger="headrace"):
        src = TableSource(tmp_path, columns=["x"], shuffle=False)
    assert [os.path.basename(p) for p, _ in src.table.files] == ["0.parquet", "1.parquet"]
    assert _values(src) == [0, 1, 2, 10, 11, 12]
    assert "skipped 1 file(s) that are not regular files (e.g. '2.parquet': a FIFO)" in (
        caplog.text
    )
    # A link to a good file is a file: read, as FileSource reads it.
    os.symlink(tmp_path / "1.parquet", tmp_path / "3.parquet")
    assert len(TableSource(tmp_path, columns=["x"])) == 9


def test_a_folders_table_files_are_stat_ed_many_at_once_when_slow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A folder of 1,000 Parquet shards on a network mount: one stat after another
    # took a second at 1 ms a stat; once slow they go to the deep pool's threads.
    import threading
    import time

    from headrace.formats import _file_walk

    _tables(tmp_path, "parquet", n=80)
    real = _file_walk.stat_listed
    threads: set[int] = set()

    def slow(path: str) -> os.stat_result:
        threads.add(threading.get_ident())
        time.sleep(5e-3)
        return real(path)

    monkeypatch.setattr(_file_walk, "stat_listed", slow)
    src = TableSource(tmp_path, columns=["x"], shuffle=False)
    assert len(threads) > 2
    assert sorted(_values(src)) == sorted(i * 10 + j for i in range(80) for j in range(3))
