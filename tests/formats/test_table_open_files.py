"""A table of many Parquet shards keeps few of them open: the idle readers are bounded."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from _fds import fds_in
from headrace.errors import FormatError, ObjectNotFoundError
from headrace.formats import Table, _table_part

SRC = str(Path(__file__).resolve().parents[2] / "src")
# 150 shards: more than the child's limit of 120 descriptors (what is tested); 20 rows
# each, in row groups of 10, so that a shard is still read group by group (it had 40:
# twice the decoding for the same paths).
NFILES, ROWS = 150, 20


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("parquet")
    for i in range(NFILES):
        x = np.arange(ROWS, dtype=np.int64) + 1000 * i
        pq.write_table(pa.table({"x": x}), folder / f"{i:03d}.parquet", row_group_size=10)
    return folder


def _order() -> np.ndarray:
    return np.random.default_rng(4).permutation(NFILES * ROWS)


def _want() -> np.ndarray:
    """Each row's ``x``, in file order: its row number plus 1,000 times its file's."""
    return (np.arange(ROWS)[None, :] + 1000 * np.arange(NFILES)[:, None]).reshape(-1)


def test_a_table_of_many_parquet_files_keeps_few_open(
    shards: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every Parquet part kept its reader's descriptor until the table closed: one per
    # shard. Now past a quarter of ulimit -n idle (8 here) the least recently used
    # close theirs.
    monkeypatch.setattr(_table_part._IDLE, "bound", 8)
    want = _want()
    tb = Table.open(shards)
    try:
        assert fds_in(shards) <= 8
        most = 0
        order = _order()
        for k in range(0, order.size, 50):
            got = tb.read_rows(order[k : k + 50], ["x"])["x"]
            np.testing.assert_array_equal(got, want[order[k : k + 50]])
            most = max(most, fds_in(shards))
        assert most <= 8
    finally:
        tb.close()
    assert fds_in(shards) == 0


def test_a_parquet_file_changed_after_its_reader_was_closed_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_table_part._IDLE, "bound", 0)  # every reader closed when idle
    for name in ("a", "b"):
        pq.write_table(pa.table({"x": np.arange(30)}), tmp_path / f"{name}.parquet")
    tb = Table.open(tmp_path)
    try:
        np.testing.assert_array_equal(tb.read_rows([1, 31], ["x"])["x"], [1, 1])
        assert fds_in(tmp_path) == 0
        new = tmp_path / "new.parquet"
        pq.write_table(pa.table({"x": np.arange(30) + 7}), new)
        os.rename(new, tmp_path / "b.parquet")
        tb._cache.clear()  # decoded row groups: decode again
        with pytest.raises(FormatError, match=r"b\.parquet: changed since it was opened"):
            tb.read_rows([32], ["x"])
        np.testing.assert_array_equal(tb.read_rows([2], ["x"])["x"], [2])  # a: unchanged
    finally:
        tb.close()


@pytest.mark.parametrize("when", ["before the reopen", "between the reopen and its check"])
def test_a_parquet_file_deleted_after_its_reader_was_closed_is_said_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, when: str
) -> None:
    # Deleted while its reader was closed (to keep few open): the reopen, or the stat
    # that checks the reopened file is the one first opened, finds no file. Said as a
    # file gone during the run, not a typo's "no such file" (or a bare stat error).
    monkeypatch.setattr(_table_part._IDLE, "bound", 0)
    for name in ("a", "b"):
        pq.write_table(pa.table({"x": np.arange(30)}), tmp_path / f"{name}.parquet")
    tb = Table.open(tmp_path)
    try:
        np.testing.assert_array_equal(tb.read_rows([1, 31], ["x"])["x"], [1, 1])
        b = str(tmp_path / "b.parquet")
        if when == "before the reopen":
            os.unlink(b)
        else:  # the race, made: pyarrow opened it, then it went
            real_stat = os.stat

            def gone(path: object, *args: object, **kw: object) -> os.stat_result:
                if os.fspath(path) == b:  # type: ignore[arg-type]
                    raise FileNotFoundError(2, "No such file or directory", b)
                return real_stat(path, *args, **kw)  # type: ignore[arg-type]

            monkeypatch.setattr(_table_part.os, "stat", gone)
        tb._cache.clear()
        with pytest.raises(ObjectNotFoundError, match=r"b\.parquet: no such file now; the table"):
            tb.read_rows([32], ["x"])
        np.testing.assert_array_equal(tb.read_rows([2], ["x"])["x"], [2])  # a: still read
    finally:
        tb.close()


CHILD = textwrap.dedent(
    """
    import hashlib, json, resource, sys
    import numpy as np
    from headrace.formats import Table

    folder, nofile, order = json.loads(sys.argv[1])
    resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
    h, err = hashlib.sha256(), ""
    try:
        tb = Table.open(folder)
        for k in range(0, len(order), 50):
            h.update(tb.read_rows(order[k : k + 50], ["x"])["x"].tobytes())
        tb.close()
    except OSError as exc:
        err = f"errno {exc.errno}: {exc}"
    print(json.dumps({"digest": h.hexdigest(), "error": err}))
    """
)


def test_more_parquet_files_than_the_descriptor_limit(shards: Path) -> None:
    # 150 shards under a limit of 120 descriptors: the table opened and read them all
    # (at most 30 readers idle, a quarter of the limit), the same bytes as read with no
    # limit: the values each row holds. (Before, every part held its reader: EMFILE.)
    arg = json.dumps([str(shards), 120, _order().tolist()])
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, arg], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["error"] == ""
    # (The child hashes its reads in turn: the same digest as all of them at once.)
    assert got["digest"] == hashlib.sha256(_want()[_order()].tobytes()).hexdigest()
