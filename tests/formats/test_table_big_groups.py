"""Row groups larger than ``window_rows`` under the windowed shuffle: real Parquet files
whose row groups (10,000 rows) are ten times a window (1,000 rows), read in sub-windows."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from headrace.errors import FormatError, StateError
from headrace.formats import Table, TableSource
from headrace.formats._row_plan import RowWindows, split_rows
from headrace.pipeline import Loader
from headrace.testing import assert_resume_exact, batch_digest

# Two files: row groups of 10,000, 10,000 and 2,500 rows, then one of 300 and one of
# 12,345 (the last sub-window of 345 rows). Windows of 1,000 rows.
GROUPS = [[10_000, 10_000, 2_500], [300, 12_345]]
N = sum(map(sum, GROUPS))
WINDOW = 1_000
WIDTH = 8


def write_files(root: Path, page_bytes: int | None = None) -> list[Path]:
    rng = np.random.default_rng(11)
    lengths = rng.integers(0, WIDTH + 1, N)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    ids = pa.ListArray.from_arrays(
        pa.array(offsets), pa.array(rng.integers(0, 1000, int(offsets[-1])).astype(np.int32))
    )
    table = pa.table({"input_ids": ids, "label": pa.array(np.arange(N, dtype=np.int64))})
    paths, off = [], 0
    kw: dict[str, Any] = {} if page_bytes is None else {"data_page_size": page_bytes}
    for k, sizes in enumerate(GROUPS):
        path = root / f"part-{k}.parquet"
        with pq.ParquetWriter(path, table.schema, **kw) as w:
            for s in sizes:
                w.write_table(table.slice(off, s), row_group_size=s)
                off += s
        paths.append(path)
    return paths


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return write_files(tmp_path_factory.mktemp("big-groups"))


def source(files: list[Path], window_rows: int = WINDOW, **kw: Any) -> TableSource:
    return TableSource(files, width=WIDTH, window_rows=window_rows, **kw)


def test_split_rows() -> None:
    np.testing.assert_array_equal(split_rows([0, 5, 4, 3, 9], 4), [0, 4, 1, 4, 3, 4, 4, 1])


def test_every_row_once_sub_windows_in_order(files: list[Path]) -> None:
    src = source(files, columns=["label"])
    windows = src.windows
    assert windows is not None and windows.split
    # 10,000 / 10,000 / 2,500 and 12,345 are windows of their own; 300 packs alone.
    np.testing.assert_array_equal(windows.counts, [10_000, 10_000, 2_500, 300, 12_345])
    starts = np.concatenate([[0], np.cumsum([s for f in GROUPS for s in f])])
    for epoch in range(2):
        order = src.read(7, np.arange(epoch * N, (epoch + 1) * N))["label"]
        np.testing.assert_array_equal(np.sort(order), np.arange(N))
        group = np.searchsorted(starts, order, side="right") - 1
        assert 1 + np.count_nonzero(np.diff(group)) == len(starts) - 1  # one run per group
        for g in range(len(starts) - 1):
            seen = order[group == g] - starts[g]
            sub = seen // WINDOW
            assert (np.diff(sub) >= 0).all()  # sub-windows one after another, in order
            for k in np.unique(sub).tolist():
                rows = seen[sub == k]
                size = min(WINDOW, int(starts[g + 1] - starts[g]) - k * WINDOW)
                np.testing.assert_array_equal(np.sort(rows), k * WINDOW + np.arange(size))
                assert size < 3 or not (np.diff(rows) > 0).all()  # shuffled within
    # Each sample alone maps to the same row (closed form).
    flat = src.read(7, np.arange(N))["label"]
    for k in (0, 999, 1_000, 17_001, N - 1):
        assert int(src.read(7, np.array([k]))["label"][0]) == flat[k]
    assert not np.array_equal(source(files, columns=["label"]).read(8, np.arange(N))["label"], flat)


def test_groups_that_fit_keep_their_plan() -> None:
    # Without a group over window_rows, sub-windows change nothing: the rows the plan
    # gave before them (golden values, from the code before this change).
    w = RowWindows([37, 64, 5, 90, 64, 1, 40], 160)
    assert not w.split
    rows = w.rows(3, np.arange(0, 301, 37, dtype=np.int64))
    np.testing.assert_array_equal(rows, [263, 279, 62, 72, 248, 229, 158, 210, 161])


def test_decoded_rows_bounded_and_decoded_once(files: list[Path]) -> None:
    src = source(files)
    # One epoch (N = 15 x 2,343) in chunks of at most 32 steps of 15 rows: a read spans
    # at most two sub-windows.
    assert N % 15 == 0
    with Loader(src, batch_size=15, seed=3, steps=N // 15) as ld:
        for _ in ld:
            pass
    table = src.table
    assert table.peak_rows <= 2 * WINDOW  # two sub-windows, never a 10,000-row group
    assert table.skipped_rows == 0
    assert table.decoded_rows == N  # every row decoded once: the groups streamed, in order
    # Whole row groups held, as before sub-windows: five times the bound.
    whole = Table.open(files)
    whole.read_rows(np.arange(10_000, 10_064))
    assert whole.peak_rows == 10_000


def test_resume_inside_a_big_group_is_exact(files: list[Path]) -> None:
    # 64 rows a step: steps 40, 95 and 200 lie inside groups of 10,000 and 12,345 rows.
    assert_resume_exact(
        lambda: Loader(source(files), batch_size=64, seed=2, prefetch=2),
        steps=210,
        resume_at=[40, 95, 200],
    )
    src = source(files, columns=["label"])
    src.read(2, np.arange(5_000, 5_064))  # mid-group: the stream skips to its sub-window
    assert 0 < src.table.skipped_rows < 10_000
    assert src.table.peak_rows <= 2 * WINDOW


def test_hosts_and_pickled_copies_give_the_same_batches(files: list[Path]) -> None:
    digests = set()
    for world in (1, 2, 3):
        parts = []
        for rank in range(world):
            src = source(files)
            if rank:
                src = pickle.loads(pickle.dumps(src))  # what a worker process reads with
                assert src.table.peak_rows == 0
            with Loader(src, batch_size=48, seed=9, rank=rank, world_size=world, steps=30) as ld:
                parts.append(list(ld))
        union = [
            {k: np.concatenate([p[t][k] for p in parts]) for k in parts[0][t]} for t in range(30)
        ]
        digests.add(batch_digest(union))
    assert len(digests) == 1


def test_worker_processes_give_the_bare_loaders_batches(files: list[Path]) -> None:
    torch = pytest.importorskip("torch", reason="torch is an optional extra")
    from headrace import torch as ht

    with Loader(source(files), batch_size=32, seed=4, steps=40) as ld:
        want = [batch_digest([b]) for b in ld]
    ds = ht.TorchDataset(source(files), batch_size=32, seed=4, steps=40)
    with ht.HeadraceDataLoader(ds, num_workers=2) as dl:
        got = [batch_digest([{k: v.numpy() for k, v in b.items()}]) for b in dl]
    assert got == want
    assert torch is not None


def test_fingerprint_changes_only_where_a_group_is_split(files: list[Path], tmp_path: Path) -> None:
    fp = source(files, columns=["label"]).fingerprint()
    assert fp["sub_windows"] == "row groups over window_rows"
    fits = source(files, columns=["label"], window_rows=20_000).fingerprint()
    assert "sub_windows" not in fits  # every group fits: the fingerprint as before

    class Before(TableSource):
        """The fingerprint of the code before sub-windows: no entry for them."""

        def fingerprint(self) -> dict[str, Any]:
            out = super().fingerprint()
            out.pop("sub_windows", None)
            return out

    old = Before(files, width=WIDTH, window_rows=WINDOW)
    with Loader(old, batch_size=16, seed=0) as a:
        next(iter(a))
        state = a.state_dict()
    with Loader(source(files), batch_size=16, seed=0) as b:
        with pytest.raises(StateError, match=r"different data .*what differs: sub_windows\)"):
            b.load_state_dict(state)


def test_corrupt_page_inside_a_streamed_group_is_named(tmp_path: Path) -> None:
    path = write_files(tmp_path, page_bytes=1024)[0]
    md = pq.ParquetFile(path).metadata
    col = md.row_group(0).column(0)  # input_ids of the first 10,000-row group
    start = col.dictionary_page_offset or col.data_page_offset
    at = start + int(col.total_compressed_size * 0.7)
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(b"\xff" * 8192)  # pages (and their headers) 70% into the chunk
    src = TableSource(path, columns=["input_ids"], width=WIDTH, window_rows=WINDOW)
    src.table.read_rows(np.arange(0, 100))  # rows before the damage read as ever
    with pytest.raises(FormatError, match=r"part-0\.parquet: row group 0: rows \[\d+, \d+\)"):
        for first in range(1_000, 10_000, WINDOW):
            src.table.read_rows(np.arange(first, first + 100))


def test_object_storage_gives_the_local_batches_fetching_each_group_once(
    files: list[Path],
) -> None:
    # file:// URLs go through the object-store path: ranged GETs of a row group's
    # chunks, then a stream over those bytes, a sub-window at a time.
    urls = [f"file://{p}" for p in files]
    with Loader(source(files), batch_size=15, seed=6, steps=N // 15) as ld:
        want = batch_digest(ld)
    remote = source(urls)
    assert remote.table.remote and remote.fingerprint() == source(files).fingerprint()
    opened = remote.object_stats
    assert opened is not None
    with Loader(remote, batch_size=15, seed=6, steps=N // 15) as ld:
        assert batch_digest(ld) == want
    table = remote.table
    assert table.peak_rows <= 2 * WINDOW and table.decoded_rows == N
    assert table.misses == 0
    stats = remote.object_stats
    assert stats is not None
    # Each row group's chunks fetched once: the bytes the groups take in the files, and
    # those of the next epoch's first group (read ahead). Twice a 10,000-row group of this
    # epoch would be 120 KB over.
    stored = [
        sum(rg.column(j).total_compressed_size for j in range(rg.num_columns))
        for p in files
        for md in [pq.ParquetFile(p).metadata]
        for rg in (md.row_group(g) for g in range(md.num_row_groups))
    ]
    starts = np.cumsum([s for f in GROUPS for s in f])
    following = int(np.searchsorted(starts, remote._rows(6, np.array([N]))[0], side="right"))
    assert stats.bytes - opened.bytes <= sum(stored) + stored[following]
    # A resume inside a group on object storage is exact as well.
    assert_resume_exact(
        lambda: Loader(source(urls), batch_size=64, seed=2, prefetch=2),
        steps=120,
        resume_at=[40, 95],
    )


def test_a_failed_read_inside_a_streamed_group_is_a_storage_error(
    files: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    from headrace.errors import StorageError
    from headrace.formats._table_part import _Part

    real = _Part._stream_reader

    def failing(self: _Part) -> Any:
        pf = real(self)

        class Reader:
            metadata = pf.metadata

            def iter_batches(self, **kw: Any) -> Any:
                it = pf.iter_batches(**kw)
                yield next(it)  # the first batch reads; then the storage fails
                raise OSError(errno.EIO, "Input/output error")

            def close(self) -> None:
                pf.close()

        return Reader()

    monkeypatch.setattr(_Part, "_stream_reader", failing)  # fault injection
    src = source(files, columns=["label"])
    src.table.read_rows(np.arange(0, 100))
    with pytest.raises(StorageError, match=r"row group 0: rows \[1000, 2000\): reading its bytes"):
        src.table.read_rows(np.arange(1_000, 1_100))


def test_a_group_shorter_than_its_footer_says_is_named(files: list[Path]) -> None:
    from headrace.formats._table_stream import GroupStream

    pf = pq.ParquetFile(files[1])  # groups of 300 and 12,345 rows
    stream = GroupStream(pf, pa, 0, ["label"], 400, 100)  # as if the footer said 400
    assert stream.take(0, 250)["label"].to_pylist() == list(range(22_500, 22_750))
    with pytest.raises(EOFError, match=r"the data ends after 300 rows; the footer says 400"):
        stream.take(250, 100)


def test_a_corrupt_page_on_object_storage_is_named(tmp_path: Path) -> None:
    path = write_files(tmp_path, page_bytes=1024)[0]
    col = pq.ParquetFile(path).metadata.row_group(0).column(0)
    start = col.dictionary_page_offset or col.data_page_offset
    with open(path, "r+b") as f:
        f.seek(start + int(col.total_compressed_size * 0.7))
        f.write(b"\xff" * 8192)
    src = TableSource(f"file://{path}", columns=["input_ids"], width=WIDTH, window_rows=WINDOW)
    src.table.read_rows(np.arange(0, 100))
    with pytest.raises(FormatError, match=r"file://.*part-0\.parquet: row group 0: rows \[\d+"):
        for first in range(1_000, 10_000, WINDOW):
            src.table.read_rows(np.arange(first, first + 100))


def test_one_host_of_many_permutes_its_rows_of_a_big_group_without_a_table() -> None:
    # Two groups of 1,000,000 rows, read in sub-windows of 65,536: host 4,095 of 4,096
    # reads 8 rows a step, 16 of each sub-window, which made a table of all 65,536.
    host = RowWindows([1_000_000, 1_000_000], 65_536)
    lone = RowWindows([1_000_000, 1_000_000], 65_536)
    batch = 8 * 4096
    for step in range(0, 40, 3):
        got = host.rows(5, step * batch + np.arange(batch - 8, batch, dtype=np.int64))
        whole = lone.rows(5, step * batch + np.arange(batch, dtype=np.int64))
        assert np.array_equal(got, whole[-8:])
    assert host._pieces.made == 0
    assert lone._pieces.made > 0
