"""A local table whose files change between two loaders over one source."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest

from headrace.errors import FormatError, ObjectNotFoundError, ReadEOFError
from headrace.formats import TableSource
from headrace.pipeline import Loader


def _write(path: Path, first: int, how: str) -> None:
    # Fixed-width and uncompressed: another version of the values is the same size,
    # with the same row groups.
    table = pa.table({"x": pa.array(np.arange(64, dtype=np.int64) + first)})
    out = path.with_name("tmp" + path.suffix) if how == "rename" else path
    if path.suffix == ".parquet":
        pq.write_table(table, out, compression="none", use_dictionary=False,
                       write_statistics=False, row_group_size=16)  # fmt: skip
    else:
        feather.write_feather(table, out, compression="uncompressed")
    if how == "rename":
        os.replace(out, path)
    else:  # written in place: a filesystem whose mtime ticks coarsely could leave it equal
        st = os.stat(path)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


@pytest.mark.parametrize("how", ["rename", "in place"])
@pytest.mark.parametrize("suffix", [".parquet", ".arrow"])
def test_a_file_rewritten_between_loaders_is_refused_not_read(
    tmp_path: Path, suffix: str, how: str
) -> None:
    # A loader's close() closes the table; the next loader over the source (each epoch
    # of a TorchDataset, a resume in the same process) reopens it. Only the size, row
    # groups and schema were compared: the new values were read into the same run.
    path = tmp_path / f"t{suffix}"
    _write(path, 0, "rename")
    size = path.stat().st_size
    src = TableSource(path, columns=["x"], shuffle=False)
    with Loader(src, batch_size=8, seed=0, prefetch=0) as loader:
        assert loader.batch_at(0)["x"].tolist() == list(range(8))
    _write(path, 1000, how)
    assert path.stat().st_size == size
    with (
        pytest.raises(FormatError, match=rf"t\{suffix}: changed since it was opened.*inode"),
        Loader(src, batch_size=8, seed=0, prefetch=0) as loader,
    ):
        loader.batch_at(1)
    # Untouched, it reads on after close, as before.
    other = tmp_path / f"u{suffix}"
    _write(other, 0, "rename")
    src2 = TableSource(other, columns=["x"], shuffle=False)
    for _ in range(2):
        with Loader(src2, batch_size=8, seed=0, prefetch=0) as loader:
            assert loader.batch_at(1)["x"].tolist() == list(range(8, 16))


@pytest.mark.parametrize("how", ["rename", "in place"])
@pytest.mark.parametrize("suffix", [".parquet", ".arrow"])
def test_a_file_rewritten_while_open_is_refused_at_its_next_read(
    tmp_path: Path, suffix: str, how: str
) -> None:
    # Until 2026-12-04 only a reopen compared the file's stamp: within one open, a mapped
    # Arrow file written in place showed its new values in its pages at once, and a
    # Parquet reader read its new row groups, beside the rows read before.
    path = tmp_path / f"t{suffix}"
    _write(path, 0, "rename")
    src = TableSource(path, columns=["x"], shuffle=False)
    assert src.read(0, np.arange(8))["x"].tolist() == list(range(8))
    _write(path, 1000, how)
    with pytest.raises(
        FormatError, match=rf"t\{suffix}: changed since it was opened.*during the run"
    ):
        src.read(0, np.arange(16, 24))  # a row group not read yet
    src.close()


def test_a_file_deleted_while_open_and_mapped_reads_on(tmp_path: Path) -> None:
    path = tmp_path / "t.arrow"
    _write(path, 0, "rename")
    src = TableSource(path, columns=["x"], shuffle=False)
    assert src.read(0, np.arange(8))["x"].tolist() == list(range(8))
    path.unlink()  # the map holds the version opened
    assert src.read(0, np.arange(16, 24))["x"].tolist() == list(range(16, 24))
    src.close()


def _stream(path: Path, first: int) -> None:
    table = pa.table({"x": pa.array(np.arange(64, dtype=np.int64) + first)})
    with pa.ipc.new_stream(path.with_name("tmp"), table.schema) as w:
        w.write_table(table, max_chunksize=16)
    os.replace(path.with_name("tmp"), path)


@pytest.mark.parametrize("kind", ["parquet", "arrow file", "arrow stream"])
def test_a_worker_copy_refuses_a_file_replaced_since_its_parent_opened_it(
    tmp_path: Path, kind: str
) -> None:
    # A pickled table (a worker's) opened its files anew: one renamed over since the
    # parent opened it (a stream's walk, remembered by size and mtime, walked again)
    # was read as its new version beside the parent's batches of the old one.
    path = tmp_path / ("t.parquet" if kind == "parquet" else "t.arrow")
    write = _stream if kind == "arrow stream" else lambda p, v: _write(p, v, "rename")
    write(path, 0)
    size = path.stat().st_size
    src = TableSource(path, columns=["x"], shuffle=False)
    with Loader(src, batch_size=8, seed=0, prefetch=0) as loader:
        assert loader.batch_at(0)["x"].tolist() == list(range(8))
    same = pickle.loads(pickle.dumps(src))  # untouched: reads as the parent does
    with Loader(same, batch_size=8, seed=0, prefetch=0) as loader:
        assert loader.batch_at(1)["x"].tolist() == list(range(8, 16))
    blob = pickle.dumps(src)
    write(path, 1000)
    assert path.stat().st_size == size
    with pytest.raises(FormatError, match=r"changed since it was opened.*inode"):
        pickle.loads(blob)


@pytest.mark.parametrize("suffix", [".parquet", ".arrow"])
def test_a_file_deleted_between_loaders_is_named_as_such(tmp_path: Path, suffix: str) -> None:
    # Until 2026-12-03 the reopen guessed a typo: "t.parquet: no such file; did you mean
    # 'u.parquet'?", for a file the table had opened and read.
    for name in ("t", "u"):
        _write(tmp_path / f"{name}{suffix}", 0, "rename")
    src = TableSource([tmp_path / f"t{suffix}", tmp_path / f"u{suffix}"], columns=["x"],
                      shuffle=False)  # fmt: skip
    with Loader(src, batch_size=8, seed=0, prefetch=0) as loader:
        assert loader.batch_at(0)["x"].tolist() == list(range(8))
    (tmp_path / f"t{suffix}").unlink()
    with (
        pytest.raises(ObjectNotFoundError) as info,
        Loader(src, batch_size=8, seed=0, prefetch=0) as loader,
    ):
        loader.batch_at(1)
    msg = str(info.value)
    assert f"t{suffix}: no such file now; the table opened it before" in msg, msg
    assert "did you mean" not in msg


@pytest.mark.parametrize(("suffix", "stats"), [(".parquet", 1), (".arrow", 2)])
def test_a_read_stats_a_parquet_file_once_and_a_mapped_one_twice(
    tmp_path: Path, suffix: str, stats: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A mapped Arrow file is stat'ed before the read (a shrink would be SIGBUS) and after
    # it (a write during it); a Parquet file, read not mapped, only after (was twice).
    path = tmp_path / f"t{suffix}"
    _write(path, 0, "rename")
    src = TableSource(path, columns=["x"], shuffle=False)
    assert src.read(0, np.arange(8))["x"].tolist() == list(range(8))
    seen: list[str] = []
    stat = os.stat

    def counted(p: object, *args: object, **kw: object) -> os.stat_result:
        seen.append(os.fspath(p))  # type: ignore[arg-type]
        return stat(p, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "stat", counted)
    assert src.read(0, np.arange(16, 24))["x"].tolist() == list(range(16, 24))
    assert seen.count(str(path)) == stats
    monkeypatch.undo()
    src.close()


def test_a_parquet_file_that_shrank_is_said_to_have_shrunk(tmp_path: Path) -> None:
    # Its read is no longer preceded by a size check: the failed read (or the check after
    # a read that got its bytes) says it shrank, as that check did.
    path = tmp_path / "t.parquet"
    _write(path, 0, "rename")
    src = TableSource(path, columns=["x"], shuffle=False)
    assert src.read(0, np.arange(8))["x"].tolist() == list(range(8))
    size = path.stat().st_size
    os.truncate(path, size // 2)
    for rows in (np.arange(56, 64), np.arange(8)):  # a group cut off; one read before
        with pytest.raises(ReadEOFError, match=rf"t\.parquet: the file shrank from {size} to"):
            src.read(0, rows)
    src.close()


def test_a_parquet_group_read_in_sub_windows_that_shrank_is_said_to_have_shrunk(
    tmp_path: Path,
) -> None:
    # A row group larger than a window is streamed in sub-windows: its failed read too.
    path = tmp_path / "t.parquet"
    n = 1 << 19  # 4 MiB: more than the stream's 1 MiB buffer
    table = pa.table({"x": pa.array(np.arange(n, dtype=np.int64))})
    pq.write_table(table, path, compression="none", use_dictionary=False,
                   write_statistics=False, row_group_size=n, data_page_size=1 << 16)  # fmt: skip
    src = TableSource(path, columns=["x"], shuffle="window", window_rows=1 << 16)
    first = src.read(0, np.arange(8))["x"]
    size = path.stat().st_size
    os.truncate(path, size // 16)  # every sub-window's bytes but a part of the first
    with pytest.raises(ReadEOFError, match=rf"t\.parquet: the file shrank from {size} to"):
        for lo in range(1 << 16, n, 1 << 16):  # other windows than the one read (cached)
            src.read(0, np.arange(lo, lo + 8))
    assert len(first) == 8
    src.close()
