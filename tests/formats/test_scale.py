"""Invariant 3 as counts: what opening a dataset holds and does per file stays what the
listing needs (benchmarks/scale_probe.py measures the same at 1,000 and 10,000 files)."""

from __future__ import annotations

import gc
import os
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from _fds import fds_in
from _scripts import run_benchmark
from headrace.formats import FileSource
from headrace.pipeline import Loader
from headrace.testing import batch_digest


def _tree(root: Path, n: int) -> None:
    for i in range(n):
        folder = root / f"c{i % 4}"
        folder.mkdir(parents=True, exist_ok=True)
        np.save(folder / f"s-{i:06d}.npy", np.full(2, i % 251, np.uint8))


def test_a_folder_is_listed_with_one_stat_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The walk stat'ed each file (is it a regular file?) and the listing stat'ed it
    # again for its size: two system calls (two round trips on a network mount) a file.
    _tree(tmp_path / "d", 300)
    calls: list[str] = []
    real = os.stat

    def counting(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        calls.append(os.fspath(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", counting)
    src = FileSource(tmp_path / "d", format="npy", shuffle="none")
    monkeypatch.undo()
    listed = [c for c in calls if c.endswith(".npy")]
    assert len(listed) == 300 == len(set(listed))
    assert src.files.sizes == [(tmp_path / "d" / k).stat().st_size for k in src.files.keys]
    with Loader(src, batch_size=30, seed=0, steps=10) as loader:
        assert len(list(loader)) == 10


def test_a_listing_holds_a_key_and_a_size_a_file_not_a_path_too(tmp_path: Path) -> None:
    # Each file's full path was held beside its key (a second string a file, ~100 bytes
    # and more the deeper the folder): 128 MB for ImageNet's 1,281,167 files.
    deep = tmp_path / ("x" * 60) / ("y" * 60)
    _tree(deep, 2000)
    gc.collect()
    tracemalloc.start()
    src = FileSource(deep, format="npy", shuffle="none")
    gc.collect()
    held = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    # Per file: the key "cK/s-NNNNNN.npy" (64 B) and its list slot, the size (32 B
    # and a slot), the ETag slot (None): ~120 B. A path of this folder is 220 B more.
    assert held / 2000 < 200, f"{held / 2000:.0f} bytes a file"
    assert src.files.keys[0] == "c0/s-000000.npy"
    # The paths joined when fetched are the files listed: a digest over every sample.
    with Loader(src, batch_size=50, seed=3, steps=40) as loader:
        first = batch_digest(loader)
    with Loader(FileSource(sorted(deep.glob("c*/*.npy")), format="npy", shuffle="none"),
                batch_size=50, seed=3, steps=40) as loader:  # fmt: skip
        assert batch_digest(loader) == first


def test_a_table_holds_arrays_a_row_group_not_python_tuples(tmp_path: Path) -> None:
    # Each row group was a tuple of three ints in a list (148 bytes a group): a table of
    # a million row groups held 148 MB in every process before it read a row.
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from headrace.formats import TableSource

    groups = 4000
    ids = pa.array([[i % 300, i % 7] for i in range(groups * 2)], pa.list_(pa.int32()))
    pq.write_table(pa.table({"input_ids": ids}), tmp_path / "g.parquet", row_group_size=2)
    TableSource(tmp_path / "g.parquet", columns=["input_ids"], width=2).close()  # imports
    gc.collect()
    tracemalloc.start()
    src = TableSource(tmp_path / "g.parquet", columns=["input_ids"], width=2, shuffle=False)
    gc.collect()
    held = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    # Per group: its file, place and rows (24 B), its span (41 B), a slot of the
    # file's row counts (8 B): ~75 B.
    assert held / groups < 110, f"{held / groups:.0f} bytes a row group"
    assert src.table.group_rows.tolist() == [2] * groups
    with Loader(src, batch_size=groups * 2, seed=0, steps=1) as loader:
        (batch,) = list(loader)
    assert batch["input_ids"][:, 0].tolist() == [i % 300 for i in range(groups * 2)]


def test_parquet_files_hold_no_stream_state_until_a_group_is_streamed(tmp_path: Path) -> None:
    # Every file carried an empty Streams (a lock and an ordered dict, ~300 B a file) for
    # row groups larger than a window, which a table of many small files never has.
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from headrace.formats import TableSource

    for f in range(40):
        ids = pa.array([[f, r] for r in range(8)], pa.list_(pa.int32()))
        pq.write_table(pa.table({"input_ids": ids}), tmp_path / f"p{f:02d}.parquet")
    ids = pa.array([[99, r] for r in range(64)], pa.list_(pa.int32()))
    pq.write_table(pa.table({"input_ids": ids}), tmp_path / "p99-big.parquet")
    src = TableSource(tmp_path, columns=["input_ids"], width=2, shuffle="window", window_rows=16)
    with Loader(src, batch_size=8, seed=0, steps=(40 * 8 + 64) // 8) as loader:
        rows = sorted(tuple(r) for b in loader for r in b["input_ids"].tolist())
    assert rows == sorted(
        [(f, r) for f in range(40) for r in range(8)] + [(99, r) for r in range(64)]
    )
    parts = src.table._parts  # type: ignore[union-attr]
    assert [p.path.endswith("big.parquet") for p in parts if p._streams is not None] == [True]


def test_a_plans_epoch_tables_go_with_the_plan() -> None:
    # Each epoch's file order and cumulative counts (O(files)) sat in a cache of the
    # module that held the plan too: gone sources' plans stayed alive, 4 epochs each.
    import pickle
    import weakref

    from headrace.formats._file_plan import _EPOCHS, FilePlan

    gc.collect()
    before = len(_EPOCHS)  # plans other tests' module fixtures hold
    counts = np.arange(1, 2001, dtype=np.int64) % 7
    plan = FilePlan(num_files=2000, counts=counts)
    n = plan.samples_per_epoch
    first = plan.locate(5, np.arange(0, 10 * n, 97, dtype=np.int64))
    assert len(_EPOCHS[plan]) == 4  # ten epochs met: the last four kept
    again = pickle.loads(pickle.dumps(plan)).locate(5, np.arange(0, 10 * n, 97, dtype=np.int64))
    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))
    gone = weakref.ref(plan)
    del plan
    gc.collect()
    assert gone() is None
    assert len(_EPOCHS) <= before + 1  # the unpickled copy's, if still alive


def test_many_table_files_open_in_a_bounded_number_of_tasks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A future a file: 10,000 submissions, the submitting thread contending with the
    # pool's for the GIL (1.5-2.3 s to open 10,000 Parquet files, 1.2 s now). A bad
    # file among them is still raised first by file order, and the rest are closed.
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from headrace.errors import FormatError
    from headrace.formats import _table_part
    from headrace.formats._tables import Table

    n = 150
    for f in range(n):
        ids = pa.array([[f, r] for r in range(2)], pa.list_(pa.int32()))
        pq.write_table(pa.table({"input_ids": ids}), tmp_path / f"p{f:03d}.parquet")
    submitted: list[str] = []
    pool = _table_part.deep_io_pool()

    class Counting:
        def submit(self, fn: Any, *args: Any) -> Any:
            submitted.append(fn.__name__)  # not fn: it holds what it opened
            return pool.submit(fn, *args)

    monkeypatch.setattr(_table_part, "deep_io_pool", Counting)
    paths = sorted(map(str, tmp_path.glob("*.parquet")))
    with Table.open(paths) as tb:
        assert tb.num_rows == 2 * n
        got = tb.read_rows([0, 2 * n - 1])["input_ids"]
        assert got.values.tolist() == [0, 0, n - 1, 1]
    assert len(submitted) == _table_part.OPEN_TASKS < n
    for f in (97, 3):
        data = (tmp_path / f"p{f:03d}.parquet").read_bytes()
        (tmp_path / f"p{f:03d}.parquet").write_bytes(data[:-60])
    with pytest.raises(FormatError, match=r"p003.parquet: truncated or corrupt") as ei:
        Table.open(paths)
    notes = "".join(ei.value.__notes__)
    assert notes == f"1 other file of the table failed to open too: {tmp_path}/p097.parquet"
    del ei
    gc.collect()
    assert fds_in(tmp_path) == 0


def test_the_probe_refuses_an_unknown_kind_naming_the_known_ones(tmp_path: Path) -> None:
    # docs/long-runs.md has users run it with --kinds KIND: "tokens" said only
    # "unknown kind 'tokens'", and left an empty folder under --root.
    p = run_benchmark("scale_probe.py", "--kinds", "tokens", "--sizes", "10", "--root",
                      str(tmp_path / "r"))  # fmt: skip
    assert p.returncode == 2
    assert "unknown kind 'tokens'; known: tokens-shards, tokens-huge," in p.stderr, p.stderr
    assert not (tmp_path / "r").exists()
