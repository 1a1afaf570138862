"""The windowed shuffle of tables: real Parquet (and Arrow IPC) files of uneven row groups."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from headrace.errors import ConfigError, StateError
from headrace.formats import Table, TableSource
from headrace.formats._row_plan import RowWindows
from headrace.pipeline import Loader, Mixture
from headrace.testing import assert_resume_exact, batch_digest

# Rows per row group, per file: uneven, 7 groups, 301 rows. With window_rows=160
# the windows are [37, 64, 5], [90 | 64, 1] (across the file boundary) and [40].
GROUPS = [[37, 64, 5, 90], [64, 1, 40]]
N = sum(map(sum, GROUPS))
WINDOW = 160
WIDTH = 12


def make_table() -> pa.Table:
    rng = np.random.default_rng(5)
    ids = [rng.integers(0, 1000, rng.integers(0, 20)).astype(np.int32).tolist() for _ in range(N)]
    return pa.table(
        {
            "input_ids": pa.array(ids, type=pa.list_(pa.int32())),
            "label": pa.array(np.arange(N, dtype=np.int64)),
        }
    )


def write_files(root: Path, fmt: str = "parquet") -> list[Path]:
    """One file per entry of GROUPS, one row group (or record batch) per size."""
    table = make_table()
    paths, off = [], 0
    for k, sizes in enumerate(GROUPS):
        path = root / f"part-{k}.{fmt}"
        if fmt == "parquet":
            with pq.ParquetWriter(path, table.schema) as w:
                for s in sizes:
                    w.write_table(table.slice(off, s), row_group_size=s)
                    off += s
        else:
            with pa.OSFile(str(path), "wb") as f, pa.ipc.new_file(f, table.schema) as w:
                for s in sizes:
                    w.write_batch(table.slice(off, s).combine_chunks().to_batches()[0])
                    off += s
        paths.append(path)
    return paths


@pytest.fixture
def parquet(tmp_path: Path) -> list[Path]:
    paths = write_files(tmp_path)
    assert [pq.ParquetFile(p).metadata.num_row_groups for p in paths] == [4, 3]
    return paths


def labels(src: TableSource, seed: int, start: int, stop: int) -> np.ndarray:
    return src.read(seed, np.arange(start, stop, dtype=np.int64))["label"]


def test_every_row_once_per_epoch_window_by_window(parquet: list[Path]) -> None:
    src = TableSource(parquet, columns=["label"], window_rows=WINDOW)
    assert src.shuffle == "window"
    windows = src.windows
    assert windows is not None
    np.testing.assert_array_equal(windows.window_start, [0, 106, 261])
    epochs = [labels(src, 3, e * N, (e + 1) * N) for e in range(3)]
    for order in epochs:
        np.testing.assert_array_equal(np.sort(order), np.arange(N))
        # Rows of one window are seen together: one run per window.
        win = np.searchsorted(windows.window_start, order, side="right") - 1
        assert 1 + np.count_nonzero(np.diff(win)) == windows.num_windows
        assert not (np.diff(order) > 0).all()  # shuffled within windows
    assert not np.array_equal(epochs[0], epochs[1])
    assert not np.array_equal(epochs[1], epochs[2])
    # Another run (fresh source) gives the same orders; another seed does not.
    again = TableSource(parquet, columns=["label"], window_rows=WINDOW)
    np.testing.assert_array_equal(labels(again, 3, N, 2 * N), epochs[1])
    assert not np.array_equal(labels(again, 4, N, 2 * N), epochs[1])
    # Any sample alone, in any order, maps to the same row (closed form, no replay).
    picks = np.array([2 * N + 5, 17, N, 3 * N - 1, 0, N - 1], dtype=np.int64)
    flat = np.concatenate(epochs)
    np.testing.assert_array_equal(src.read(3, picks)["label"], flat[picks])
    for k in picks.tolist():
        assert int(src.read(3, np.array([k]))["label"][0]) == flat[k]


def test_row_windows_packing_and_empty_groups() -> None:
    w = RowWindows([0, 5, 0, 3, 0, 10, 1, 0], window_rows=4)
    # A group past the limit opens a window; a larger group is a window of its own;
    # empty groups join the window at hand and no window is empty.
    np.testing.assert_array_equal(w.window_start, [0, 5, 8, 18])
    assert w.max_groups == 3
    rows = w.rows(1, np.arange(2 * 19, dtype=np.int64))
    for e in range(2):
        np.testing.assert_array_equal(np.sort(rows[e * 19 : (e + 1) * 19]), np.arange(19))
    assert RowWindows([7, 7], window_rows=10**6).num_windows == 1


def test_resume_exact_mid_epoch_and_across_epochs(parquet: list[Path]) -> None:
    # 301 rows, 16 per step: step 18 straddles epochs 0 and 1, step 37 epochs 1 and 2.
    assert_resume_exact(
        lambda: Loader(
            TableSource(
                parquet,
                columns=["input_ids", "label"],
                width=WIDTH,
                truncate=True,
                window_rows=WINDOW,
            ),
            batch_size=16,
            seed=2,
        ),
        steps=40,
        resume_at=[0, 7, 18, 19, 37],
    )


def test_host_slices_union_to_the_global_batch(parquet: list[Path]) -> None:
    digests = set()
    for world in (1, 2, 4):
        parts = []
        for rank in range(world):
            src = TableSource(parquet, width=WIDTH, truncate=True, window_rows=WINDOW)
            with Loader(
                src, batch_size=16, seed=9, rank=rank, world_size=world, prefetch=0, steps=25
            ) as ld:
                parts.append(list(ld))
        union = [
            {k: np.concatenate([p[t][k] for p in parts]) for k in parts[0][t]} for t in range(25)
        ]
        digests.add(batch_digest(union))
    assert len(digests) == 1


def test_mixture_of_windowed_tables_resumes_exactly(parquet: list[Path]) -> None:
    def make() -> Loader:
        a = TableSource(parquet, columns=["label"], window_rows=WINDOW)
        b = TableSource(parquet, columns=["label"], window_rows=50)
        mix = Mixture({"a": a, "b": b}, [0.7, 0.3], batch_size=16)
        return Loader(mix, batch_size=16, seed=4, steps=70)

    # Source a passes its epoch boundaries near steps 27 and 54, b near step 63.
    assert_resume_exact(make, steps=70, resume_at=[26, 27, 54, 63])
    with make() as ld:
        batches = list(ld)
    for source in (0, 1):
        got = np.concatenate([b["label"][b["source"] == source] for b in batches])
        # Each source walks whole epochs: no row comes twice before every row came once.
        full, rem = divmod(got.size, N)
        counts = np.bincount(got, minlength=N)
        assert full >= 1 and counts.min() >= full and counts.max() <= full + 1
        assert np.count_nonzero(counts == full + 1) == rem
    assert TableSource(parquet, columns=["label"]).read(0, np.empty(0, np.int64))["label"].size == 0


def test_same_rows_as_arrow_ipc_and_pyarrow(parquet: list[Path], tmp_path: Path) -> None:
    arrow = write_files(tmp_path, "arrow")
    samples = np.arange(2 * N + 40, dtype=np.int64)
    kw = {"width": WIDTH, "truncate": True, "shuffle": "window", "window_rows": WINDOW}
    got = TableSource(parquet, **kw).read(7, samples)
    via_arrow = TableSource(arrow, **kw).read(7, samples)
    assert (
        TableSource(arrow, columns=["label"]).shuffle == "full"
    )  # Arrow keeps the full shuffle by default
    assert batch_digest([got]) == batch_digest([via_arrow])
    # What pyarrow itself reads for the same plan.
    rows = RowWindows([s for f in GROUPS for s in f], WINDOW).rows(7, samples)
    ref = pa.concat_tables([pq.read_table(p) for p in parquet]).take(pa.array(rows))
    np.testing.assert_array_equal(got["label"], ref.column("label").to_numpy())
    for i, ids in enumerate(ref.column("input_ids").to_pylist()):
        ids = ids[:WIDTH]
        np.testing.assert_array_equal(got["input_ids"][i, : len(ids)], ids)
        assert got["input_ids_mask"][i].sum() == len(ids)
        assert not got["input_ids"][i, len(ids) :].any()


def test_each_row_group_decoded_once_per_epoch(parquet: list[Path]) -> None:
    groups = sum(map(len, GROUPS))
    # A one-group cache is raised to hold the largest window (3 groups).
    table = Table.open(parquet, row_group_cache=1)
    src = TableSource(table, columns=["input_ids"], width=WIDTH, truncate=True, window_rows=WINDOW)
    assert src.table.row_group_cache == 3
    for start in range(0, N, 32):
        src.read(0, np.arange(start, min(start + 32, N), dtype=np.int64))
    assert src.table.decoded == groups
    for start in range(N, 2 * N, 32):
        src.read(0, np.arange(start, min(start + 32, 2 * N), dtype=np.int64))
    # Epoch 1 may open with the window epoch 0 ended with, still cached.
    assert groups - src.windows.max_groups <= src.table.decoded - groups <= groups  # type: ignore[union-attr]
    full = TableSource(parquet, columns=["input_ids"], width=WIDTH, truncate=True, shuffle="full")
    for start in range(0, N, 32):
        full.read(0, np.arange(start, min(start + 32, N), dtype=np.int64))
    assert full.table.decoded >= 2 * groups  # a 4-group cache thrashes under the full shuffle


def test_cache_holds_a_window_and_survives_pickling(parquet: list[Path]) -> None:
    src = TableSource(parquet, columns=["label"], window_rows=10**6)  # one window: all 7 groups
    assert src.windows is not None and src.windows.num_windows == 1
    assert src.table.row_group_cache == 7
    copy = pickle.loads(pickle.dumps(src))
    assert copy.table.row_group_cache == 7
    np.testing.assert_array_equal(labels(copy, 1, 0, N), labels(src, 1, 0, N))
    assert copy.table.decoded == 7
    small = TableSource(Table.open(parquet, row_group_cache=9), columns=["label"], window_rows=1)
    assert small.table.row_group_cache == 9  # never lowered


def test_defaults_fingerprint_and_state(parquet: list[Path], tmp_path: Path) -> None:
    arrow = write_files(tmp_path, "arrow")
    fp = TableSource(arrow, columns=["label"]).fingerprint()
    assert fp["shuffle"] is True and "window_rows" not in fp  # unchanged: old states still load
    assert TableSource(arrow, columns=["label"], shuffle=False).fingerprint()["shuffle"] is False
    fp = TableSource(parquet, columns=["label"]).fingerprint()
    assert (fp["shuffle"], fp["window_rows"]) == ("window", 65_536)
    in_order = TableSource(parquet, columns=["label"], shuffle=False)
    np.testing.assert_array_equal(labels(in_order, 0, N - 2, N + 2), [N - 2, N - 1, 0, 1])

    def loader(window_rows: int) -> Loader:
        return Loader(
            TableSource(parquet, columns=["label"], window_rows=window_rows), batch_size=8, seed=0
        )

    with loader(WINDOW) as a:
        next(iter(a))
        state = a.state_dict()
    with loader(100) as b, pytest.raises(StateError):
        b.load_state_dict(state)  # another window size is another plan


@pytest.mark.parametrize("bad", [0, -5, 2.5, True, "64", None])
def test_bad_window_rows(parquet: list[Path], bad: object) -> None:
    with pytest.raises(ConfigError, match=r"window_rows must be an integer >= 1"):
        TableSource(parquet, columns=["label"], window_rows=bad)  # type: ignore[arg-type]


def test_bad_shuffle_and_cache(parquet: list[Path]) -> None:
    for bad in ("blocks", None, 1, "Window"):
        with pytest.raises(ConfigError, match=r"shuffle must be True, False .*'full' or 'window'"):
            TableSource(parquet, columns=["label"], shuffle=bad)  # type: ignore[arg-type]
    tb = Table.open(parquet)
    for bad in (0, -1, 2.0, False):
        with pytest.raises(ConfigError, match=r"row_group_cache must be an integer >= 1"):
            tb.row_group_cache = bad  # type: ignore[assignment]


def test_a_state_refused_for_the_default_shuffle_says_which_to_pass(tmp_path: Path) -> None:
    # shuffle=True resolves by where the files are: a save_to_disk folder copied to S3
    # is shuffled by windows there, in full here. The refusal said only "shuffle: true
    # when the state was saved, "window" now", though both sides passed the default.
    t = pa.table({"x": np.arange(400)})
    with pa.OSFile(str(tmp_path / "t.arrow"), "wb") as f, pa.ipc.new_stream(f, t.schema) as w:
        w.write_table(t, max_chunksize=50)

    def state(**kw: object) -> dict[str, object]:
        with Loader(TableSource(tmp_path / "t.arrow", **kw), batch_size=8, seed=2) as ld:  # type: ignore[arg-type]
            next(iter(ld))
            return ld.state_dict()

    full, window = state(), state(shuffle="window")
    for saved, other, fix in ((full, "window", "full"), (window, "full", "window")):
        ld = Loader(TableSource(tmp_path / "t.arrow", shuffle=other), batch_size=8, seed=2)  # type: ignore[arg-type]
        with pytest.raises(StateError, match=rf"default, shuffle=True, .*pass shuffle='{fix}'"):
            ld.load_state_dict(saved)
        ld.close()
        with Loader(TableSource(tmp_path / "t.arrow", shuffle=fix), batch_size=8, seed=2) as ld:  # type: ignore[arg-type]
            ld.load_state_dict(saved)
