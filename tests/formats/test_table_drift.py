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

from headrace.errors import FormatError, ObjectNotFoundError
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
