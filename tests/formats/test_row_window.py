"""The windowed shuffle of row files: PaddedRows and PairRows reading whole windows."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np
import pytest

from _row_files import padded_rows
from headrace.errors import (
    ConfigError,
    DataError,
    FormatError,
    ReadEOFError,
    StateError,
    StorageError,
)
from headrace.formats import PaddedRows, PairRows, write_row_file
from headrace.formats._row_plan import RowWindows
from headrace.formats._row_window import MAX_WINDOWS, WINDOW_BYTES, default_window_rows
from headrace.io import LocalFile, RangeReader, ReaderConfig
from headrace.pipeline import Loader
from headrace.plan import retry_rows
from headrace.testing import assert_resume_exact, batch_digest

# 300 rows of 1025 uint16 tokens (2050 bytes: rows straddle 4 KiB pages); windows of
# 64 rows: four full windows and a last one of 44.
N, W, WR = 300, 1025, 64
NUM_WINDOWS = 5


def make_rows(root: Path, *, ext: str = ".npy", empty_every: int = 0) -> tuple[Path, Path]:
    return padded_rows(root, N, W, seed=7, prompt_mod=7, ext=ext, empty_every=empty_every)


def windowed(tp: Path, mp: Path | None, **kw: object) -> PaddedRows:
    kw.setdefault("context", W - 1)
    kw.setdefault("truncate", True)  # rows of up to W tokens, read at shorter contexts
    kw.setdefault("window_rows", WR)
    return PaddedRows(tp, mp, shuffle="window", **kw)  # type: ignore[arg-type]


def plan_rows(seed: int, samples: np.ndarray, n: int = N, wr: int = WR) -> np.ndarray:
    """The plan from RowWindows alone, over blocks of ``wr`` rows."""
    blocks = [wr] * (n // wr) + ([n % wr] if n % wr else [])
    return RowWindows(blocks, wr).rows(seed, samples)


def pad_reference(t: np.ndarray, m: np.ndarray | None, L: int, side: str, pad: int, ign: int):
    """Rows padded the obvious way, one at a time."""
    xs, ys, losses = [], [], []
    for i in range(len(t)):
        row = t[i, : L + 1].astype(np.int64)
        mm = (row != pad) if m is None else m[i, : L + 1] != 0
        s = 0
        if side == "left":
            c = int(np.flatnonzero((row != pad) | mm)[-1]) + 1
            s = L + 1 - c
            row = np.concatenate([np.full(s, pad), row[:c]])
            mm = np.concatenate([np.zeros(s, bool), mm[:c]])
        loss = mm[1:].copy()
        loss[:s] = False  # a target predicted from a pad is never a target
        xs.append(row[:L])
        ys.append(np.where(loss, row[1:], ign))
        losses.append(loss)
    return {"x": np.array(xs), "y": np.array(ys), "loss_mask": np.array(losses)}


def epoch_rows(src: PaddedRows, seed: int, epoch: int) -> np.ndarray:
    return src.rows_of(seed, np.arange(epoch * N, (epoch + 1) * N, dtype=np.int64))


# -- the plan ------------------------------------------------------------------------------


def test_every_row_once_per_epoch_one_run_per_window(tmp_path: Path) -> None:
    tp, mp = make_rows(tmp_path)
    src = windowed(tp, mp)
    epochs = [epoch_rows(src, 3, e) for e in range(3)]
    for rows in epochs:
        np.testing.assert_array_equal(np.sort(rows), np.arange(N))
        # Rows of one window are read together: one run per window.
        assert 1 + np.count_nonzero(np.diff(rows // WR)) == NUM_WINDOWS
        assert not (np.diff(rows) > 0).all()  # shuffled within windows
    assert not np.array_equal(epochs[1], epochs[2])
    again = windowed(tp, mp)  # a fresh source: the same epochs
    np.testing.assert_array_equal(epoch_rows(again, 3, 2), epochs[2])
    assert not np.array_equal(epoch_rows(again, 4, 2), epochs[2])
    np.testing.assert_array_equal(np.concatenate(epochs), plan_rows(3, np.arange(3 * N)))


def test_default_window_rows_is_sized_in_bytes(tmp_path: Path) -> None:
    # The fewest equal windows of at most WINDOW_BYTES over all files read.
    assert default_window_rows(16_384, 2050) == 5462  # 3 windows of 11.2 MB
    assert default_window_rows(16_384, 2050 + 1025) == 4096  # with a 1-byte mask
    assert default_window_rows(10, 1 << 30) == 1  # rows larger than a window
    assert default_window_rows(100, 8) == 100  # small data: one window
    tp, mp = make_rows(tmp_path)
    assert windowed(tp, mp, window_rows=None).window_rows == N  # 900 KB: one window
    # A window larger than the file is the whole file, and holds only its rows.
    huge = windowed(tp, mp, window_rows=10**12)
    got = huge.read(0, np.arange(N, dtype=np.int64))
    assert huge._windows is not None and huge._windows.windows_read == 1
    np.testing.assert_array_equal(np.sort(huge.rows_of(0, np.arange(N))), np.arange(N))
    assert got["x"].shape == (N, W - 1)
    empty = huge.read(0, np.zeros(0, np.int64))
    assert {k: v.shape for k, v in empty.items()} == dict.fromkeys(got, (0, W - 1))
    cap = WINDOW_BYTES // (3 * W)  # most rows of tokens + mask in 16 MiB
    assert default_window_rows(2 * cap, 3 * W) == cap
    assert default_window_rows(2 * cap + 1, 3 * W) == -(-(2 * cap + 1) // 3)


# -- batches -------------------------------------------------------------------------------


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("with_mask", [True, False])
@pytest.mark.parametrize("ext", [".npy", ".bin"])
def test_batches_equal_a_naive_reference(
    tmp_path: Path, side: str, with_mask: bool, ext: str
) -> None:
    tp, mp = make_rows(tmp_path, ext=ext)
    tok = np.load(tp) if ext == ".npy" else np.fromfile(tp, np.uint16).reshape(N, W)
    mask = np.load(mp) if ext == ".npy" else np.fromfile(mp, np.uint8).reshape(N, W)
    L = 700
    src = windowed(tp, mp if with_mask else None, context=L, pad_side=side, ignore_index=-100)
    # Whole steps of a loader, including the steps that cross windows and epochs.
    with Loader(src, batch_size=24, seed=5, prefetch=0, steps=30, chunk_steps=2) as ld:
        got = list(ld)
    rows = plan_rows(5, np.arange(30 * 24))
    want = pad_reference(tok[rows], mask[rows] if with_mask else None, L, side, 0, -100)
    for k, v in want.items():
        np.testing.assert_array_equal(np.concatenate([b[k] for b in got]), v, err_msg=k)


def test_same_batches_for_every_strategy_sync_async_and_host_count(tmp_path: Path) -> None:
    tp, mp = make_rows(tmp_path, empty_every=7)
    digests = set()
    for strategy in ("mmap", "pread", "adaptive"):
        for prefetch in (0, 4):
            src = windowed(tp, mp, context=64, pad_side="left", reader=strategy)
            held = src._windows._held  # type: ignore[union-attr]
            batches = []
            with Loader(src, batch_size=16, seed=9, prefetch=prefetch, steps=45) as ld:
                for b in ld:
                    assert len(held) <= MAX_WINDOWS
                    batches.append(b)
            digests.add(batch_digest(batches))
    for world in (2, 4):
        parts = []
        for rank in range(world):
            src = windowed(tp, mp, context=64, pad_side="left")
            with Loader(src, batch_size=16, seed=9, rank=rank, world_size=world, steps=45) as ld:
                parts.append(list(ld))
        union = [
            {k: np.concatenate([p[t][k] for p in parts]) for k in parts[0][t]} for t in range(45)
        ]
        digests.add(batch_digest(union))
    assert len(digests) == 1


def test_resume_exact_mid_epoch_and_across_epochs(tmp_path: Path) -> None:
    tp, mp = make_rows(tmp_path, empty_every=5)

    def make() -> Loader:
        src = windowed(tp, mp, context=32, pad_side="left")
        return Loader(src, batch_size=16, seed=1, prefetch=2, chunk_steps=3)

    # 18.75 steps per epoch: step 18 straddles epochs 0 and 1, step 37 epochs 1 and 2.
    assert_resume_exact(make, steps=40, resume_at=[0, 3, 18, 19, 37])


def test_empty_rows_replaced_deterministically_through_row_reads(tmp_path: Path) -> None:
    tp, mp = make_rows(tmp_path, empty_every=3)  # a third of all rows are empty
    tok, mask = np.load(tp), np.load(mp)
    samples = np.arange(2 * N, dtype=np.int64)
    with RangeReader("pread") as reader:
        src = windowed(tp, mp, reader=reader)
        whole = src.read(2, samples)
        stats = reader.stats
        # Samples of both epochs are gathered window by window: one read of each.
        assert src._windows is not None and src._windows.windows_read == NUM_WINDOWS
        # Replacement rows take row reads (one per file per round), never whole windows.
        assert stats.reads > 2 * src._windows.windows_read
    # Each replacement is the first non-empty retry row of its sample, as under the
    # full shuffle, whatever the batch: here the windowed rows, chunked otherwise.
    rows = plan_rows(2, samples)
    final = rows.copy()
    for i in np.flatnonzero(~mask[rows, 1:].any(axis=1)).tolist():
        a = 1
        final[i] = retry_rows(2, samples[[i]], a, N)[0]
        while not mask[final[i], 1:].any():
            a += 1
            final[i] = retry_rows(2, samples[[i]], a, N)[0]
    assert (final != rows).sum() > 50
    want = pad_reference(tok[final], mask[final], W - 1, "right", 0, -1)
    for k, v in want.items():
        np.testing.assert_array_equal(whole[k], v, err_msg=k)
    other = windowed(tp, mp)
    parts = [other.read(2, samples[i : i + 37]) for i in range(0, 2 * N, 37)]
    assert batch_digest([whole]) == batch_digest(
        [{k: np.concatenate([p[k] for p in parts]) for k in whole}]
    )


@pytest.mark.parametrize("mask_dtype", ["uint8", "bool", "int32"])
def test_pair_rows_windowed_with_member_widths(tmp_path: Path, mask_dtype: str) -> None:
    widths = {"anchor": 33, "positive": 17, "negative": 65}
    rng = np.random.default_rng(2)
    files: dict = {}
    toks = {}
    for i, (name, w) in enumerate(widths.items()):
        tok = rng.integers(1, 30_000, (N, w), dtype=np.uint32)
        tok[np.arange(w)[None, :] >= rng.integers(1, w + 1, N)[:, None]] = 0
        toks[name] = tok
        write_row_file(tmp_path / f"{name}.tok.bin", tok)
        if i < 2:  # the negative has no mask file
            write_row_file(tmp_path / f"{name}.mask.npy", (tok != 0).astype(mask_dtype))
            files[name] = (tmp_path / f"{name}.tok.bin", tmp_path / f"{name}.mask.npy")
        else:
            files[name] = tmp_path / f"{name}.tok.bin"
    with RangeReader("pread") as reader:
        src = PairRows(files, shuffle="window", window_rows=WR, reader=reader)
        with Loader(src, batch_size=20, seed=3, steps=45, chunk_steps=2) as ld:
            got = list(ld)
        read = src._windows.windows_read  # type: ignore[union-attr]
        assert reader.stats.reads == 5 * read  # one read per file (5 files) per window
    rows = plan_rows(3, np.arange(45 * 20))
    visits = 1 + np.count_nonzero(np.diff(rows // WR))  # 3 epochs of 5 windows each
    assert visits - 3 <= read <= visits + 1  # a window may end one epoch and start the next
    for name in widths:
        x = np.concatenate([b[f"{name}_x"] for b in got])
        np.testing.assert_array_equal(x, toks[name][rows])
        assert x.dtype == np.uint32 and x.shape == (900, widths[name])
        np.testing.assert_array_equal(np.concatenate([b[f"{name}_mask"] for b in got]), x != 0)
    full = PairRows(files)
    assert_resume_exact(
        lambda: Loader(PairRows(files, shuffle="window", window_rows=50), batch_size=8, seed=4),
        steps=45,
        resume_at=[0, 20, 37, 38],
    )
    assert full.fingerprint()["shuffle"] is True and "window_rows" not in full.fingerprint()


# -- reads ---------------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["pread", "mmap", "adaptive"])
def test_one_read_per_window_not_per_batch(tmp_path: Path, strategy: str) -> None:
    tp, mp = make_rows(tmp_path)
    data = 2 * N * W + N * W  # tokens and mask bytes, headers aside
    counts = {}
    for shuffle in ("window", True):
        with RangeReader(strategy) as reader:  # type: ignore[arg-type]
            kw = {"window_rows": WR} if shuffle == "window" else {}
            src = PaddedRows(tp, mp, context=W - 1, shuffle=shuffle, reader=reader, **kw)
            with Loader(src, batch_size=10, seed=0, steps=N // 10, chunk_steps=1) as ld:
                assert sum(len(b["x"]) for b in ld) == N  # one epoch
            counts[shuffle] = reader.stats
    win, full = counts["window"], counts[True]
    # One read per file per window (the last window's read-ahead may add one).
    assert 2 * NUM_WINDOWS <= win.reads <= 2 * (NUM_WINDOWS + 1)
    # Mapped reads count the pages they fault in: each read's two edge pages at most.
    assert data <= win.bytes_read <= data + 3 * WR * W + 2 * 4096 * win.reads
    assert full.reads == 2 * (N // 10)  # a read per file per chunk (of one batch here)


def test_read_ahead_keeps_windows_in_use_and_reads_the_next(tmp_path: Path) -> None:
    tp, mp = make_rows(tmp_path)
    src = windowed(tp, mp, reader="pread")
    win = src._windows
    assert win is not None
    rows = plan_rows(0, np.arange(N))
    first_end = int(np.flatnonzero(np.diff(rows // WR))[0]) + 1  # samples of window 1
    src.read(0, np.arange(8))
    assert win.windows_read == 1
    second_end = first_end + int(np.flatnonzero(np.diff(rows[first_end:] // WR))[0]) + 1
    src.prefetch(0, np.arange(8, first_end - 33))  # over half a window away: nothing new
    assert win.windows_read == 1
    near = np.arange(first_end - 20, first_end - 12)
    src.prefetch(0, near)  # within half a window (32 samples) of the next one: read it
    assert win.windows_read == 2 and len(win._held) == 2
    src.read(0, near)
    src.read(0, np.arange(first_end, first_end + 8))  # served from the read-ahead
    assert win.windows_read == 2
    # The last read and the next chunk use both held windows: neither is evicted to
    # read the third ahead (its first sample is within half a window of this chunk).
    src.read(0, np.arange(first_end - 4, first_end + 4))
    src.prefetch(0, np.arange(first_end - 4, second_end - 10))
    assert win.windows_read == 2 and len(win._held) == MAX_WINDOWS
    src.read(0, np.arange(second_end - 10, second_end))  # only the second window now
    src.prefetch(0, np.arange(second_end - 10, second_end))  # the first can go: read ahead
    assert win.windows_read == 3 and len(win._held) == MAX_WINDOWS
    # A read spanning three windows gathers each in turn, holding at most two.
    spread = np.arange(0, N, 7, dtype=np.int64)
    np.testing.assert_array_equal(src.read(0, spread)["x"], windowed(tp, mp).read(0, spread)["x"])
    assert len(win._held) <= MAX_WINDOWS
    copy = pickle.loads(pickle.dumps(src))  # worker copies read their own windows
    assert copy._windows is not None and not copy._windows._held
    assert batch_digest([copy.read(0, spread)]) == batch_digest([src.read(0, spread)])
    src.close()


class FlakyFile(LocalFile):
    """Fails the next ``fail`` positional reads (fault injection)."""

    fail = 0

    def pread_into(self, buf, offset):  # type: ignore[no-untyped-def,override]
        if FlakyFile.fail > 0:
            FlakyFile.fail -= 1
            raise StorageError(5, f"{self.path}: injected read failure at byte {offset}")
        super().pread_into(buf, offset)


def test_failed_read_ahead_is_retried_and_demand_failures_raise(tmp_path: Path) -> None:
    tp, mp = make_rows(tmp_path)
    want = windowed(tp, mp).read(1, np.arange(40))
    # The thread engine: the injected failure is in LocalFile.pread_into, which io_uring bypasses.
    reader = RangeReader(ReaderConfig(strategy="pread", engine="threads"), opener=FlakyFile)
    try:
        src = windowed(tp, mp, reader=reader)
        win = src._windows
        assert win is not None
        FlakyFile.fail = 10**6
        src.prefetch(1, np.arange(40))  # the read-ahead fails ...
        for w in win._held.values():
            for fut in w.futures:
                assert isinstance(fut.exception(), StorageError)
        FlakyFile.fail = 0
        started = win.windows_read
        needed = len(np.unique(plan_rows(1, np.arange(40)) // WR))
        got = src.read(1, np.arange(40))  # ... and is read again when needed
        assert batch_digest([got]) == batch_digest([want])
        assert win.windows_read == started + needed
        FlakyFile.fail = 10**6
        with pytest.raises(StorageError, match=r"(tok|mask)\.npy: injected read failure"):
            src.read(1, np.arange(N - 40, N))
        assert all(f.done() for w in win._held.values() for f in w.futures)
        FlakyFile.fail = 0
        assert batch_digest([src.read(1, np.arange(40))]) == batch_digest([want])
    finally:
        FlakyFile.fail = 0
        reader.close()


@pytest.mark.parametrize("strategy", ["pread", "mmap"])
def test_truncated_files_name_the_file(tmp_path: Path, strategy: str) -> None:
    tp, mp = make_rows(tmp_path, ext=".bin")
    src = windowed(tp, mp, reader=strategy)
    src.read(0, np.arange(4))
    os.truncate(tp, 100 * 2 * W)  # shrinks under the open source: later windows are gone
    rows = plan_rows(0, np.arange(N))
    later = np.flatnonzero((rows >= 128) & (rows // WR != rows[0] // WR))[:4]
    with pytest.raises(ReadEOFError, match=r"tok\.bin: .*past the end|tok\.bin: .*end of file"):
        src.read(0, later)
    src.prefetch(0, later)  # a failing read-ahead raises when needed, not before
    with pytest.raises(ReadEOFError, match=r"tok\.bin"):
        src.read(0, later)
    src.close()
    os.truncate(tp, 100 * 2 * W - 1)
    with pytest.raises(DataError, match=r"tok\.bin: file size 204999 is not a multiple"):
        windowed(tp, mp)
    tn, mn = make_rows(tmp_path)
    os.truncate(tn, os.path.getsize(tn) - 3)
    with pytest.raises(FormatError, match=r"tok\.npy: truncated"):
        windowed(tn, mn)


# -- config and state --------------------------------------------------------------------


def test_bad_config_names_the_parameter(tmp_path: Path) -> None:
    tp, mp = make_rows(tmp_path)
    for make in (
        lambda **kw: PaddedRows(tp, mp, context=8, **kw),
        lambda **kw: PairRows({"a": (tp, mp)}, **kw),
    ):
        with pytest.raises(ConfigError, match=r"shuffle must be True, False .*'full' or 'window'"):
            make(shuffle="windows")
        with pytest.raises(ConfigError, match="shuffle must be"):
            make(shuffle=1)
        for bad in (0, -3, 2.5, True, "64"):
            with pytest.raises(ConfigError, match=r"window_rows must be an integer >= 1"):
                make(shuffle="window", window_rows=bad)
        with pytest.raises(ConfigError, match=r"window_rows=64 applies only to shuffle='window'"):
            make(shuffle=True, window_rows=64)
        assert make(shuffle="full").fingerprint() == make().fingerprint()


def test_fingerprint_records_the_mode_and_refuses_other_states(tmp_path: Path) -> None:
    tp, mp = make_rows(tmp_path)
    full = PaddedRows(tp, mp, context=8, truncate=True).fingerprint()
    assert full["shuffle"] is True and "window_rows" not in full  # as before windows
    assert (
        PaddedRows(tp, mp, context=8, truncate=True, shuffle=False).fingerprint()["shuffle"]
        is False
    )
    fp = windowed(tp, mp, context=8).fingerprint()
    assert (fp["shuffle"], fp["window_rows"]) == ("window", WR)

    def loader(**kw: object) -> Loader:
        return Loader(PaddedRows(tp, mp, context=8, truncate=True, **kw), batch_size=4)  # type: ignore[arg-type]

    with loader(shuffle="window", window_rows=WR) as a:
        next(iter(a))
        state = a.state_dict()
    for kw in ({}, {"shuffle": "full"}, {"shuffle": "window", "window_rows": 32}):
        with loader(**kw) as b, pytest.raises(StateError):
            b.load_state_dict(state)
    with loader(shuffle="window", window_rows=WR) as c:
        c.load_state_dict(state)


def test_a_share_reads_only_its_blocks_and_retries_a_failed_read_ahead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from headrace.formats import _row_window as rw

    monkeypatch.setattr(rw, "BLOCK_BYTES", 8 * (2 * W + W))  # 8 rows of tokens and mask a block
    tp, mp = make_rows(tmp_path)
    samples = np.arange(40, dtype=np.int64)
    rows = plan_rows(1, samples)
    mine = samples[(rows % WR) // 8 < 2]  # this host's samples: rows in the first 2 blocks
    want = windowed(tp, mp).read(1, mine)
    reader = RangeReader(ReaderConfig(strategy="pread", engine="threads"), opener=FlakyFile)
    try:
        src = windowed(tp, mp, reader=reader)
        win = src._windows
        assert win is not None and win.block_rows == 8
        FlakyFile.fail = 10**6
        src.prefetch(1, mine, share=(0.0, 0.25))  # its blocks fail to arrive ...
        FlakyFile.fail = 0
        got = src.read(1, mine)  # ... and are read again when the batch needs them
        assert batch_digest([got]) == batch_digest([want])
        held = win._held[int(rows[0] // WR)]
        # Only the blocks its rows lie in (and none past its share) were read.
        assert held.filled[:2].all() and not held.filled[3:].any()
        FlakyFile.fail = 10**6
        other = samples[(rows % WR) // 8 >= 4]
        with pytest.raises(StorageError, match="injected read failure"):
            src.read(1, other)  # a demand read that fails raises, after every read ends
        assert all(f.done() for w in win._held.values() for f in w.futures)
    finally:
        FlakyFile.fail = 0
        reader.close()
