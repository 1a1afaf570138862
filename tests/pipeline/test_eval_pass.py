"""Evaluation: one exact pass over held-out data, on any number of hosts.

``Loader(..., epochs=1)`` ends after ``ceil(n / B)`` steps and marks every row:
``valid`` is False for the samples that fill the last batch past the pass (the
next epoch's first ones), ``sample`` says which sample each row is. Checked here
on real files of every source kind: over all hosts, the valid rows are each
sample of the pass exactly once (sample numbers and per-sample digests), so a sum
and a count reduced over hosts give the single-process metric.
"""

from __future__ import annotations

import hashlib
import io
import math
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from _exact_pass import check_exact, one_pass, reference, row_digests
from _fds import fds_in
from headrace.errors import ConfigError
from headrace.formats import FileSource, PaddedRows, PairRows, TableSource, TokenSource
from headrace.pipeline import Loader, Mapped, Mixture

L = 16


# -- the sources, on real files ---------------------------------------------------------


@pytest.fixture
def val_bin(tmp_path: Path) -> Path:
    path = tmp_path / "val.bin"
    np.random.default_rng(1).integers(0, 50_000, 1_000, dtype=np.uint16).tofile(path)
    return path


def test_tokens_pass_is_exact_on_1_to_4_hosts(val_bin: Path) -> None:
    def make() -> TokenSource:
        return TokenSource(val_bin, context=L, shuffle=False)

    assert make().samples_per_epoch == (1_000 - 1) // L  # 62; the 999 % 16 = 7 last never read
    check_exact(make, 12)
    check_exact(make, 64, worlds=(1, 2, 4))  # n < B: one step, mostly padding
    # Each step split by where its samples lie: other rows per host, the same union.
    check_exact(make, 12, worlds=(2, 3), host_order="address")


def test_tokens_pass_covers_the_file_in_order(val_bin: Path) -> None:
    """Unshuffled, the valid rows are the non-overlapping windows in file order: each
    token but the last few is predicted once (y) and seen once (x)."""
    t = np.fromfile(val_bin, dtype=np.uint16)
    with Loader(TokenSource(val_bin, context=L, shuffle=False), batch_size=8, epochs=1) as lo:
        batches = list(lo)
    valid = np.concatenate([b["valid"] for b in batches])
    y = np.concatenate([b["y"] for b in batches])[valid]
    assert np.array_equal(y.reshape(-1), t[1 : 1 + 62 * L])
    assert valid.sum() == 62 and (~valid).sum() == 2  # 8 steps of 8: two wrapped rows


def test_shuffled_pass_is_exact_too(val_bin: Path) -> None:
    check_exact(lambda: TokenSource(val_bin, context=L, window_bytes=256), 12, worlds=(1, 3))


@pytest.fixture
def rows(tmp_path: Path) -> tuple[Path, Path]:
    rng = np.random.default_rng(2)
    n, w = 37, L + 1
    lengths = rng.integers(2, w + 1, n)
    tok = rng.integers(1, 1000, (n, w), dtype=np.uint16)
    tok[np.arange(w) >= lengths[:, None]] = 0
    np.save(tmp_path / "tok.npy", tok)
    np.save(tmp_path / "mask.npy", (tok != 0).astype(np.uint8))
    return tmp_path / "tok.npy", tmp_path / "mask.npy"


def test_padded_rows_pass_is_exact(rows: tuple[Path, Path]) -> None:
    check_exact(lambda: PaddedRows(*rows, context=L, shuffle=False, empty_rows="keep"), 12)
    check_exact(
        lambda: PaddedRows(*rows, context=L, empty_rows="keep"), 12, worlds=(2,)
    )  # shuffled


def test_padded_rows_fewer_than_the_batch(tmp_path: Path) -> None:
    tok = np.arange(1, 5 * (L + 1) + 1, dtype=np.uint16).reshape(5, L + 1)
    np.save(tmp_path / "t.npy", tok)
    np.save(tmp_path / "m.npy", np.ones_like(tok, dtype=np.uint8))
    check_exact(
        lambda: PaddedRows(tmp_path / "t.npy", tmp_path / "m.npy", context=L, empty_rows="keep"),
        12,
    )


def test_pairs_pass_is_exact(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    members = {}
    for name, w in (("anchor", 8), ("positive", 12)):
        tok = rng.integers(1, 100, (23, w), dtype=np.uint32)
        path = tmp_path / f"{name}.npy"
        np.save(path, tok)
        members[name] = path
    check_exact(lambda: PairRows(members, shuffle=False, empty_rows="keep"), 12)


def _table_rows(n: int) -> list[list[int]]:
    rng = np.random.default_rng(4)
    return [rng.integers(1, 1000, int(rng.integers(3, 20))).tolist() for _ in range(n)]


def test_parquet_pass_is_exact(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    table = pa.table({"input_ids": _table_rows(41)})
    pq.write_table(table, tmp_path / "val.parquet", row_group_size=10)
    check_exact(lambda: TableSource(tmp_path / "val.parquet", width=24, shuffle=False), 12)
    check_exact(lambda: TableSource(tmp_path / "val.parquet", width=24), 12, worlds=(4,))


def test_save_to_disk_pass_is_exact(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    datasets.Dataset.from_dict({"input_ids": _table_rows(29)}).save_to_disk(tmp_path / "ds")
    check_exact(lambda: TableSource(tmp_path / "ds", width=24, shuffle=False), 12)


def test_npy_files_pass_is_exact(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    for i in range(19):
        np.save(tmp_path / f"{i:03d}.npy", rng.random((4, 3)).astype(np.float32))
    check_exact(lambda: FileSource(sorted(tmp_path.glob("*.npy")), format="npy"), 12)


def test_npz_files_pass_is_exact(tmp_path: Path) -> None:
    rng = np.random.default_rng(6)
    for i in range(14):
        np.savez(tmp_path / f"{i:03d}.npz", x=rng.random(5), label=np.int64(i))
    check_exact(
        lambda: FileSource(sorted(tmp_path.glob("*.npz")), format="npz", shuffle="none"),
        12,
    )


def test_jpeg_files_pass_is_exact(tmp_path: Path) -> None:
    image = pytest.importorskip("PIL.Image")
    rng = np.random.default_rng(7)
    for i in range(11):
        buf = io.BytesIO()
        image.fromarray(rng.integers(0, 255, (8, 8, 3), dtype=np.uint8)).save(buf, "JPEG")
        (tmp_path / f"{i:03d}.jpg").write_bytes(buf.getvalue())
    check_exact(lambda: FileSource(sorted(tmp_path.glob("*.jpg")), format="jpeg"), 8, (1, 2, 4))


def test_mapped_source_pass_is_exact(rows: tuple[Path, Path]) -> None:
    def rename(arrays: dict, samples: Any) -> dict:
        del samples
        return {"tokens": arrays["x"], "labels": arrays["y"]}

    check_exact(
        lambda: Mapped(PaddedRows(*rows, context=L, empty_rows="keep"), rename), 12, worlds=(1, 3)
    )


# -- a mixture of two validation sets, reported separately -------------------------------


def _two_val_sets(rows: tuple[Path, Path], b: int) -> Mixture:
    a = PaddedRows(*rows, context=L, shuffle=False, empty_rows="keep")  # 37 samples
    t = np.load(rows[0])[:20, ::-1].copy()  # a second set: 20 of the rows, reversed
    np.save(rows[0].with_name("rev.npy"), t)
    np.save(rows[1].with_name("revm.npy"), (t != 0).astype(np.uint8))
    d = PaddedRows(
        rows[0].with_name("rev.npy"), rows[1].with_name("revm.npy"), context=L, empty_rows="keep"
    )
    return Mixture({"fwd": a, "rev": d}, [0.5, 0.5], batch_size=b)


@pytest.mark.parametrize("weights", [(0.5, 0.5), (0.9, 0.1)])
def test_mixture_pass_sees_every_sample_of_each_set_once(
    rows: tuple[Path, Path], weights: tuple[float, float]
) -> None:
    b = 12
    base = _two_val_sets(rows, b)
    sizes = [s.samples_per_epoch for s in base.sources]
    refs = [reference(s, n) for s, n in zip(base.sources, sizes, strict=True)]

    def make() -> Mixture:
        return Mixture(dict(zip(base.names, base.sources, strict=True)), weights, batch_size=b)

    for world in (1, 2, 3, 4):
        per_source: list[list[int]] = [[], []]
        digests: list[Counter[str]] = [Counter(), Counter()]
        steps = 0
        for batches in one_pass(make, b, world):
            steps = len(batches)
            for batch in batches:
                for s in (0, 1):
                    ok = batch["valid"] & (batch["source"] == s)
                    per_source[s] += batch["sample"][ok].tolist()
                    digests[s].update(d for d, v in zip(row_digests(batch), ok, strict=True) if v)
        for s in (0, 1):
            assert sorted(per_source[s]) == list(range(sizes[s])), (weights, world, s)
            assert digests[s] == refs[s]
        # The pass ends at the first step by which every set was read whole.
        counts = base.plan.__class__(weights, b).cumulative(np.arange(1, steps + 1) * b)
        assert np.all(counts[-1] >= sizes) and not np.all(counts[-2] >= sizes)


# -- re-running and interleaving ------------------------------------------------------------


def test_a_fresh_eval_loader_gives_the_same_batches(rows: tuple[Path, Path]) -> None:
    src = PaddedRows(*rows, context=L, shuffle=False, empty_rows="keep")
    runs = []
    for prefetch in (0, 8, 8):
        with Loader(src, batch_size=12, epochs=1, prefetch=prefetch) as lo:
            runs.append([{k: v.copy() for k, v in bt.items()} for bt in lo])
    for other in runs[1:]:
        assert len(other) == len(runs[0])
        for a, b in zip(runs[0], other, strict=True):
            assert a.keys() == b.keys()
            assert all(np.array_equal(a[k], b[k]) for k in a)


def test_eval_between_training_steps_leaves_training_alone(
    tmp_path: Path, rows: tuple[Path, Path], val_bin: Path
) -> None:
    train_bin = tmp_path / "train.bin"
    np.random.default_rng(8).integers(0, 50_000, 40_000, dtype=np.uint16).tofile(train_bin)
    train_src = TokenSource(train_bin, context=L, window_bytes=8192)

    def train(every: int | None) -> str:
        h = hashlib.sha256()
        with Loader(train_src, batch_size=8, steps=60, chunk_steps=4) as lo:
            for i, batch in enumerate(lo):
                h.update(batch["x"].tobytes())
                if every and i % every == 0:
                    # The same val file as a fresh source each time, and one kept open.
                    with Loader(
                        TokenSource(val_bin, context=L, shuffle=False), batch_size=8, epochs=1
                    ) as ev:
                        assert sum(int(b["valid"].sum()) for b in ev) == 62
            assert lo.step == 60
        return h.hexdigest()

    assert train(None) == train(7) == train(1)


def test_breaking_out_of_an_eval_loop_releases_threads_and_files(val_bin: Path) -> None:
    before = threading.active_count()
    src = TokenSource(val_bin, context=L, shuffle=False)
    lo = Loader(src, batch_size=4, epochs=1)
    for i, _ in enumerate(lo):
        if i == 2:
            break
    lo.close()
    assert fds_in(val_bin.parent) == 0
    assert threading.active_count() <= before + 8  # the process-wide I/O pool at most
    with Loader(TokenSource(val_bin, context=L, shuffle=False), batch_size=4, epochs=1) as lo:
        assert sum(1 for _ in lo) == math.ceil(62 / 4)
    assert fds_in(val_bin.parent) == 0


# -- the API's edges ------------------------------------------------------------------------


def test_epochs_two_marks_both_passes(val_bin: Path) -> None:
    src = TokenSource(val_bin, context=L, shuffle=False)
    with Loader(src, batch_size=8, epochs=2) as lo:
        batches = list(lo)
    assert len(batches) == math.ceil(2 * 62 / 8)
    sample = np.concatenate([b["sample"] for b in batches])
    valid = np.concatenate([b["valid"] for b in batches])
    assert np.array_equal(sample[valid], np.arange(124)) and not valid[124:].any()
    with Loader(src, batch_size=8, epochs=2) as lo:  # random access marks too
        last = lo.batch_at(15)
    assert np.array_equal(last["sample"], np.arange(120, 128))
    assert np.array_equal(last["valid"], np.arange(120, 128) < 124)


def test_epochs_and_steps_together_are_refused(val_bin: Path) -> None:
    src = TokenSource(val_bin, context=L, shuffle=False)
    with pytest.raises(ConfigError, match="epochs=1, steps=5"):
        Loader(src, batch_size=8, epochs=1, steps=5)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ConfigError, match="epochs must be"):
            Loader(src, batch_size=8, epochs=bad)


def test_a_source_without_epochs_is_refused() -> None:
    class Endless:
        def fingerprint(self) -> dict:
            return {"kind": "endless"}

        def read(self, seed: int, samples: np.ndarray) -> dict:
            del seed
            return {"x": samples.copy()}

    with pytest.raises(ConfigError, match=r"Endless.*samples_per_epoch"):
        Loader(Endless(), batch_size=8, epochs=1)


def test_a_source_with_its_own_valid_key_is_refused(tmp_path: Path) -> None:
    for i in range(3):
        np.savez(tmp_path / f"{i}.npz", valid=np.ones(2), x=np.zeros(2))
    src = FileSource(sorted(tmp_path.glob("*.npz")), format="npz")
    with (
        Loader(src, batch_size=2, epochs=1, prefetch=0) as lo,
        pytest.raises(ConfigError, match=r"'valid'.*FileSource"),
    ):
        next(iter(lo))


def test_a_mixture_with_a_source_weighted_zero_is_refused(rows: tuple[Path, Path]) -> None:
    a = PaddedRows(*rows, context=L, empty_rows="keep")
    b = PaddedRows(*rows, context=L, shuffle=False, empty_rows="keep")
    mix = Mixture({"a": a, "b": b}, [1.0, 0.0], batch_size=8)
    with pytest.raises(ConfigError, match=r"'b'.*weight 0"):
        Loader(mix, batch_size=8, epochs=1)


def test_resume_in_the_middle_of_an_eval_pass(rows: tuple[Path, Path]) -> None:
    src = PaddedRows(*rows, context=L, shuffle=False, empty_rows="keep")
    with Loader(src, batch_size=4, epochs=1) as lo:
        whole = [b["sample"].copy() for b in lo]
    with Loader(src, batch_size=4, epochs=1) as lo:
        it = iter(lo)
        head = [next(it)["sample"].copy() for _ in range(3)]
        state = lo.state_dict()
    with Loader(src, batch_size=4, epochs=1) as lo:
        lo.load_state_dict(state)
        tail = [b["sample"].copy() for b in lo]
    assert all(np.array_equal(a, b) for a, b in zip(whole, head + tail, strict=True))


# -- samples a source would give in another's place -------------------------------------------


@pytest.mark.parametrize("pad_side", ["right", "left"])
def test_an_empty_row_is_kept_not_replaced_in_a_pass(tmp_path: Path, pad_side: str) -> None:
    """A row with no target replaced by another row would count that row twice and
    this one never; kept, it comes as it is (no target), and every row comes once."""
    tok = np.arange(1, 6 * (L + 1) + 1, dtype=np.uint16).reshape(6, L + 1)
    tok[2] = 0  # all padding
    mask = (tok != 0).astype(np.uint8)
    mask[4] = 0  # a prompt with no target
    np.save(tmp_path / "t.npy", tok)
    np.save(tmp_path / "m.npy", mask)
    files = (tmp_path / "t.npy", tmp_path / "m.npy")
    with pytest.raises(ConfigError, match=r"t\.npy replaces a row .*empty_rows='keep'"):
        Loader(PaddedRows(*files, context=L), batch_size=4, epochs=1)
    src = PaddedRows(*files, context=L, shuffle=False, empty_rows="keep", pad_side=pad_side)
    with Loader(src, batch_size=4, epochs=1) as lo:
        batches = list(lo)
    valid = np.concatenate([b["valid"] for b in batches])
    x = np.concatenate([b["x"] for b in batches])[valid]
    loss = np.concatenate([b["loss_mask"] for b in batches])[valid]
    assert len(x) == 6 and np.array_equal(loss.any(axis=1), [1, 1, 0, 1, 0, 1])
    content = [set(r.tolist()) - {0} for r in x]
    assert content[2] == set() and content[4] == set(tok[4, :L].tolist())
    assert content[0] == set(tok[0, :L].tolist())  # not replaced by, nor replacing, another
    # A training source keeps replacing them, as before.
    train = PaddedRows(*files, context=L, shuffle=False)
    assert train.read(0, np.arange(6, dtype=np.int64))["loss_mask"].any(axis=1).all()


def test_an_empty_pair_group_is_kept_in_a_pass(tmp_path: Path) -> None:
    a = np.arange(1, 5 * 6 + 1, dtype=np.uint32).reshape(5, 6)
    p = a + 100
    p[3] = 0  # an empty required member: its group would be replaced
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "p.npy", p)
    members = {"anchor": tmp_path / "a.npy", "positive": tmp_path / "p.npy"}
    with pytest.raises(ConfigError, match=r"PairRows .*a\.npy replaces"):
        Loader(PairRows(members), batch_size=4, epochs=1)
    src = PairRows(members, shuffle=False, empty_rows="keep")
    with Loader(src, batch_size=4, epochs=1) as lo:
        batches = list(lo)
    valid = np.concatenate([b["valid"] for b in batches])
    anchors = np.concatenate([b["anchor_x"] for b in batches])[valid]
    assert np.array_equal(anchors, a)
    assert not np.concatenate([b["positive_mask"] for b in batches])[valid][3].any()


def test_files_replaced_when_corrupt_are_refused_in_a_pass(tmp_path: Path) -> None:
    for i in range(3):
        np.save(tmp_path / f"{i}.npy", np.zeros(2))
    npys = sorted(tmp_path.glob("*.npy"))
    src = FileSource(npys, format="npy", on_corrupt="replace")
    with pytest.raises(ConfigError, match="on_corrupt='raise'"):
        Loader(src, batch_size=2, epochs=1)
    mix = Mixture({"ok": FileSource(npys, format="npy"), "bad": src}, [0.5, 0.5], batch_size=2)
    with pytest.raises(ConfigError, match=r"on_corrupt='raise'.*'bad'"):
        Loader(mix, batch_size=2, epochs=1)
    with Loader(Mapped(src, lambda a, s: a), batch_size=2, steps=1) as lo:  # training: fine
        assert len(list(lo)) == 1
    with pytest.raises(ConfigError, match="on_corrupt='raise'"):
        Loader(Mapped(src, lambda a, s: a), batch_size=2, epochs=1)


def test_empty_rows_is_checked(rows: tuple[Path, Path]) -> None:
    with pytest.raises(ConfigError, match=r"empty_rows must be 'replace'.*'drop'"):
        PaddedRows(*rows, context=L, empty_rows="drop")  # type: ignore[arg-type]
    a = PaddedRows(*rows, context=L)
    b = PaddedRows(*rows, context=L, empty_rows="keep")
    assert "empty_rows" not in a.fingerprint()  # states saved before it still load
    assert b.fingerprint()["empty_rows"] == "keep"


def test_iterating_a_finished_pass_again_is_the_whole_pass(rows: tuple[Path, Path]) -> None:
    """``for batch in val_loader`` at every evaluation: each is the whole pass (it was
    nothing, with a warning); so is one after a pass broken off (it went on from its
    step until 2026-12-07); a state loaded goes on from its step."""
    src = PaddedRows(*rows, context=L, shuffle=False, empty_rows="keep")
    with Loader(src, batch_size=8, epochs=1) as lo:
        first = [b["sample"].copy() for b in lo]
        assert len(first) == 5 and lo.step == 5
        again = [b["sample"].copy() for b in lo]
        assert len(again) == 5 and all(
            np.array_equal(a, b) for a, b in zip(first, again, strict=True)
        )
        it = iter(lo)
        next(it)
        next(it)
        # A pass left part way (a sanity check's 2 batches): the next is whole too.
        rest = [b["sample"].copy() for b in lo]
        assert len(rest) == 5 and np.array_equal(rest[0], first[0])
        # chunks() (what worker processes read) starts a finished pass over too.
        assert sum(len(arrays["sample"]) for _, arrays in lo.chunks()) == 40
        assert len(lo) == 5
        state = lo.state_dict()  # saved once the pass is over (step 5 of 5)
    # Loaded on other hosts, it stands as the loader did: the next iteration is the pass.
    with Loader(src, batch_size=8, epochs=1) as lo:
        whole = np.concatenate([b["sample"][b["valid"]] for b in lo])
    assert np.array_equal(whole, np.arange(37))
    for world in (1, 2):
        got = []
        for rank in range(world):
            with Loader(src, batch_size=8, epochs=1, rank=rank, world_size=world) as lo:
                lo.load_state_dict(state)
                got += [b["sample"][b["valid"]] for b in lo]
        assert np.array_equal(np.sort(np.concatenate(got)), whole)
