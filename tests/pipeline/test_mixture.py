from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from headrace.errors import ConfigError, DataError, StateError
from headrace.formats import PaddedRows, TableSource, TokenSource, write_row_file
from headrace.pipeline import Loader, Mapped, Mixture, _mixture
from headrace.pipeline._mixture import source_seed
from headrace.plan import MixturePlan, fingerprint_digest, fingerprint_parts, quantize_weights
from headrace.testing import assert_resume_exact, batch_digest

# -- the plan ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "weights",
    [[0.5, 0.3, 0.2], [1, 1, 1], [0.05, 0.9, 0.03, 0.02, 1e-3], [7.0], [0, 0.5, 0, 0, 0.5, 0]],
)
def test_proportions_and_exact_per_step_counts(weights: list[float]) -> None:
    b, steps = 32, 10_000
    plan = MixturePlan(weights, b)
    counts = plan.step_counts(np.arange(steps))
    assert (counts.sum(axis=1) == b).all()
    assert (counts >= 0).all()
    w = np.asarray(weights) / np.sum(weights)
    share = counts.sum(axis=0) / (steps * b)
    assert np.all(np.abs(share - w) <= 0.01 * w + 1e-12)
    # Closed form: the cumulative count at any step is the sum of the step counts.
    cum = plan.cumulative(np.arange(steps + 1) * b)
    np.testing.assert_array_equal(cum[1:] - cum[:-1], counts)
    np.testing.assert_array_equal(cum[-1], counts.sum(axis=0))
    depth = int(np.ceil(np.log2(len(weights)))) if len(weights) > 1 else 0
    ideal = np.arange(steps + 1)[:, None] * b * plan.weights[None, :]
    assert np.abs(cum - ideal).max() <= depth / 2 + 1e-9


def test_far_steps_cost_nothing_and_stay_exact() -> None:
    plan = MixturePlan([0.6, 0.3, 0.1], 1024)
    t = np.array([10**9, 10**9 + 1])
    c = plan.step_counts(t)
    assert (c.sum(axis=1) == 1024).all()
    assert plan.cumulative(t * 1024).sum(axis=1).tolist() == (t * 1024).tolist()


def _cumulative_exact(plan: MixturePlan, n: int) -> list[int]:
    """``C_s(n)`` by the split tree in Python ints (no overflow, whatever ``n``)."""
    num = plan.numerators
    out = [0] * len(num)

    def split(lo: int, hi: int, here: int) -> None:
        if hi - lo < 2:
            out[lo] = here
            return
        mid = (lo + hi) // 2
        wl, w = sum(num[lo:mid]), sum(num[lo:hi])
        left = (2 * here * wl + w) // (2 * w)
        split(lo, mid, left)
        split(mid, hi, here - left)

    split(0, len(num), n)
    return out


@pytest.mark.parametrize(
    "weights", [[0.6, 0.3, 0.1], [0.05, 0.9, 0.03, 0.02, 1e-3], [0.6, 0, 0, 0.4, 0]]
)
def test_cumulative_is_exact_up_to_the_last_int64_sample(weights: list[float]) -> None:
    # Step 2**40 of a batch of 1,024 is sample 2**50: the apportionment worked in int64
    # on n * weight and refused anything from 2**46 on (resume at step 2**40 of a
    # batch of 64 was refused), though every such count fits.
    plan = MixturePlan(weights, 1024)
    ns = [0, 1, 2**46 - 1, 2**46, 2**50 + 12345, 2**62 + 7, 2**63 - 1]
    got = plan.cumulative(np.array(ns, dtype=np.int64))
    assert got.tolist() == [_cumulative_exact(plan, n) for n in ns]
    small = np.arange(0, 10**6, 997)
    assert plan.cumulative(small).tolist() == [_cumulative_exact(plan, n) for n in small.tolist()]
    with pytest.raises(ConfigError, match=r"mixture sample counts must be >= 0 \(got -1\)"):
        plan.cumulative(-1)


def test_locate_at_step_2_40_numbers_each_source_on_from_its_count() -> None:
    b = 1024
    plan = MixturePlan([0.6, 0.3, 0.1], b)
    t = 2**40
    samples = t * b + np.arange(2 * b, dtype=np.int64)  # steps 2**40 and 2**40 + 1
    src, local = plan.locate(3, samples)
    for s in range(3):
        mine = np.sort(local[src == s])
        first = _cumulative_exact(plan, t * b)[s]
        assert mine.tolist() == list(range(first, first + mine.size))
    # The last step whose samples are int64 still plans; the next sample does not exist.
    last = (2**63 - 1) // b - 1
    src, local = plan.locate(3, last * b + np.arange(b, dtype=np.int64))
    assert np.bincount(src, minlength=3).tolist() == plan.step_counts(last).tolist()
    for wrong in (
        lambda: plan.locate(3, np.array([2**63 - 1], dtype=np.int64)),
        lambda: plan.step_counts(last + 1),
    ):
        with pytest.raises(ConfigError, match=r"9007199254740991\].*2\*\*63 - 1"):
            wrong()


def test_locate_numbers_each_source_locally_in_order() -> None:
    plan = MixturePlan([0.5, 0.25, 0.25], 16)
    samples = np.arange(16 * 50, dtype=np.int64)
    src, local = plan.locate(7, samples)
    for s in range(3):
        mine = local[src == s]
        assert sorted(mine.tolist()) == list(range(mine.size))
        # Steps consume each source's samples in order.
        per_step = [local[(src == s) & (samples // 16 == t)] for t in range(50)]
        flat = np.concatenate([np.sort(p) for p in per_step])
        np.testing.assert_array_equal(flat, np.arange(mine.size))
    # Positions are interleaved per step, not in blocks, and differ by seed.
    other, _ = MixturePlan([0.5, 0.25, 0.25], 16).locate(8, samples)
    assert not np.array_equal(src, other)
    first_half = src.reshape(50, 16)[:, :8]
    assert all(len(set(row.tolist())) > 1 for row in first_half[:10])


def test_weight_errors() -> None:
    with pytest.raises(ValueError, match="finite and >= 0"):
        quantize_weights([1.0, -1.0])
    assert quantize_weights([0.5, 0, 0.5, 0.0]) == (1 << 15, 0, 1 << 15, 0)
    with pytest.raises(ValueError, match="non-empty"):
        quantize_weights([])
    with pytest.raises(ValueError, match="below 1/65536"):
        quantize_weights([1.0, 1e-9])
    assert sum(quantize_weights([1 / 3, 1 / 3, 1 / 3])) == 1 << 16
    with pytest.raises(ValueError, match="batch_size"):
        MixturePlan([1.0], 0)


# -- the source ----------------------------------------------------------------------------


def rows_dataset(root: Path, name: str, n: int, base: int) -> PaddedRows:
    rng = np.random.default_rng(n)
    tok = rng.integers(1, 1000, (n, 17), dtype=np.uint16)
    tok[:, 0] = base + np.arange(n) % 1000  # which source, which row
    write_row_file(root / f"{name}.npy", tok)
    return PaddedRows(root / f"{name}.npy", context=16)


@pytest.fixture
def sources(tmp_path: Path) -> dict[str, PaddedRows]:
    return {
        "big": rows_dataset(tmp_path, "big", 500, 0),
        "mid": rows_dataset(tmp_path, "mid", 90, 10_000),
        "tiny": rows_dataset(tmp_path, "tiny", 7, 20_000),
    }


W3 = [0.6, 0.3, 0.1]


def mixture(sources: dict[str, PaddedRows], b: int = 16) -> Mixture:
    return Mixture(sources, W3, batch_size=b)


def test_batches_carry_source_ids_and_follow_the_plan(sources: dict[str, PaddedRows]) -> None:
    mix = mixture(sources)
    with Loader(mix, batch_size=16, seed=5, prefetch=0, steps=200) as ld:
        batches = list(ld)
    src = np.concatenate([b["source"] for b in batches])
    x0 = np.concatenate([b["x"][:, 0] for b in batches])
    assert src.dtype == np.int32
    np.testing.assert_array_equal(x0 // 10_000, src)  # each sample really is from its source
    share = np.bincount(src, minlength=3) / src.size
    assert np.allclose(share, W3, atol=0.01)
    for b in batches:
        counts = np.bincount(b["source"], minlength=3)
        assert counts.sum() == 16
    # Per-source epochs: the tiny source (7 rows) cycles through fresh permutations.
    _, local = mix.plan.locate(5, np.arange(src.size, dtype=np.int64))
    tiny = np.flatnonzero(src == 2)
    tiny_rows = (x0[tiny] - 20_000)[np.argsort(local[tiny])]  # in local sample order
    assert sorted(tiny_rows[:7].tolist()) == list(range(7))
    assert sorted(tiny_rows[7:14].tolist()) == list(range(7))
    seed2 = source_seed(5, 2)
    np.testing.assert_array_equal(
        tiny_rows[:14], sources["tiny"].rows_of(seed2, np.arange(14, dtype=np.int64))
    )


def test_empty_read_has_the_keys_and_shapes_of_a_batch(sources: dict[str, PaddedRows]) -> None:
    mix = mixture(sources)
    full = mix.read(5, np.arange(16, dtype=np.int64))
    empty = mix.read(5, np.zeros(0, dtype=np.int64))
    assert set(empty) == set(full)
    for k, v in full.items():
        assert empty[k].shape == (0, *v.shape[1:]) and empty[k].dtype == v.dtype


def test_host_slices_union_is_the_global_batch(sources: dict[str, PaddedRows]) -> None:
    def run(world: int) -> list[dict[str, np.ndarray]]:
        parts = []
        for rank in range(world):
            with Loader(
                mixture(sources),
                batch_size=16,
                seed=3,
                rank=rank,
                world_size=world,
                prefetch=0,
                steps=40,
            ) as ld:
                parts.append(list(ld))
        return [
            {k: np.concatenate([p[t][k] for p in parts]) for k in parts[0][t]} for t in range(40)
        ]

    one = run(1)
    assert batch_digest(run(2)) == batch_digest(one) == batch_digest(run(4))
    # Host slices are mixed: host 0 of 4 sees several sources.
    with Loader(
        mixture(sources), batch_size=16, seed=3, rank=0, world_size=4, prefetch=0, steps=40
    ) as ld:
        seen = np.concatenate([b["source"] for b in ld])
    assert set(seen.tolist()) == {0, 1, 2}


@pytest.mark.parametrize("prefetch", [0, 8])
def test_resume_mid_mixture_is_exact(sources: dict[str, PaddedRows], prefetch: int) -> None:
    assert_resume_exact(
        lambda: Loader(mixture(sources), batch_size=16, seed=9, prefetch=prefetch, chunk_steps=4),
        steps=40,
        resume_at=[0, 1, 3, 17, 28, 39],
    )


def test_resume_far_away(sources: dict[str, PaddedRows]) -> None:
    ld = Loader(mixture(sources), batch_size=16, seed=9, prefetch=0)
    far = 10**7
    ld.load_state_dict({**ld.state_dict(), "step": far})
    got = next(iter(ld))
    want = ld.batch_at(far)
    assert batch_digest([got]) == batch_digest([want])
    assert np.bincount(got["source"], minlength=3).sum() == 16


def test_resume_at_step_2_40_reads_each_source_where_its_count_says(
    sources: dict[str, PaddedRows],
) -> None:
    # 2**40 steps of 64 are 2**46 samples: refused before (exact only below 2**46).
    b, far = 64, 2**40
    mix = mixture(sources, b)
    with Loader(mix, batch_size=b, seed=9, prefetch=0) as ld:
        ld.load_state_dict({**ld.state_dict(), "step": far})
        it = iter(ld)
        got = [next(it), next(it)]
        assert ld.state_dict()["step"] == far + 2
    src = np.concatenate([g["source"] for g in got])
    first = mix.plan.cumulative(far * b)
    for s, (name, rows) in enumerate(sources.items()):
        local = np.arange(first[s], first[s] + int((src == s).sum()))
        want = rows.read(source_seed(9, s), local)["x"][:, 0]
        have = np.concatenate([g["x"][g["source"] == s, 0] for g in got])
        assert sorted(have.tolist()) == sorted(want.tolist()), name


def test_batch_size_mismatch_is_refused(sources: dict[str, PaddedRows]) -> None:
    # The loader asks the mixture at construction, so no batch is ever read wrong.
    for b in (48, 16, 64):
        with pytest.raises(ConfigError, match=rf"Mixture\(batch_size=32\).*batch_size={b}"):
            Loader(mixture(sources, b=32), batch_size=b, seed=1, prefetch=0)


def test_reads_of_steps_of_another_batch_size_are_refused(sources: dict[str, PaddedRows]) -> None:
    mix = mixture(sources, b=32)
    with pytest.raises(ConfigError, match=r"not host slices of steps of 32 samples"):
        mix.read(1, np.arange(48, dtype=np.int64))  # a loader step of 48: 32 + 16
    # Any equal share of each step is a host slice (in address order, not contiguous).
    assert mix.read(1, np.array([0, 5, 9, 32, 40, 63], dtype=np.int64))["x"].shape[0] == 6


def test_check_batch_size(sources: dict[str, PaddedRows]) -> None:
    mix = mixture(sources, b=32)
    mix.check_batch_size(32)
    with pytest.raises(ConfigError, match=r"Mixture\(batch_size=32\) cannot serve.*batch_size=64"):
        mix.check_batch_size(64)


def test_a_numpy_integer_batch_size_is_taken_like_the_loaders(
    sources: dict[str, PaddedRows],
) -> None:
    # Loader(batch_size=np.int64(16)) is taken; Mixture(batch_size=np.int64(16)) was
    # refused as "not a positive integer", so one config value could not serve both.
    import json

    mix = Mixture(sources, W3, batch_size=np.int64(16))
    assert type(mix.batch_size) is int and type(mix.plan.batch_size) is int
    with Loader(mix, batch_size=np.int64(16), seed=1, prefetch=0, steps=5) as loader:
        got = batch_digest(loader)
        json.dumps(loader.state_dict())
    assert got == batch_digest(Loader(mixture(sources), batch_size=16, seed=1, steps=5))
    for bad in (True, 16.0, np.float64(16)):
        with pytest.raises(ConfigError, match="batch_size must be a positive integer"):
            Mixture(sources, W3, batch_size=bad)  # type: ignore[arg-type]


def test_config_and_shape_errors(tmp_path: Path, sources: dict[str, PaddedRows]) -> None:
    with pytest.raises(ConfigError, match="3 sources but 2 weights"):
        Mixture(sources, [1, 2], batch_size=8)
    with pytest.raises(ConfigError, match="finite and >= 0"):
        Mixture(sources, [1, -2, 2], batch_size=8)
    with pytest.raises(ConfigError, match="at least one source"):
        Mixture([], [], batch_size=8)
    np.arange(5000, dtype=np.uint16).tofile(tmp_path / "t.bin")
    tokens = TokenSource(tmp_path / "t.bin", dtype="uint16", context=16)
    mix = Mixture([sources["big"], tokens], [0.5, 0.5], batch_size=16)
    with pytest.raises(DataError, match=r"mixture sources differ in keys: '1' gives"):
        mix.read(0, np.arange(16, dtype=np.int64))
    assert "weights" in mix.fingerprint()
    mix.close()
    # A rare source of another shape is found at the first batch, not ~1,000 samples in.
    short = TokenSource(tmp_path / "t.bin", dtype="uint16", context=8)
    rare = Mixture({"long": tokens, "short": short}, [0.999, 0.001], batch_size=4)
    first = rare.plan.locate(0, np.arange(4, dtype=np.int64))[0]
    assert not first.any()  # the first batch holds no sample of the rare source
    with pytest.raises(DataError, match=r"'short' gives .* but 'long' gives"):
        rare.read(0, np.arange(4, dtype=np.int64))
    rare.close()


class _Counting:
    """A user's own source: sample numbers as data, optionally with a 'source' array of
    its own, and a close() that may fail."""

    def __init__(self, name: str, *, own_source: bool = False, close_fails: bool = False) -> None:
        self.name, self.own_source, self.close_fails = name, own_source, close_fails
        self.closed = False

    def fingerprint(self) -> dict[str, object]:
        return {"name": self.name}

    def read(self, seed: int, samples: np.ndarray) -> dict[str, np.ndarray]:
        out = {"x": samples.astype(np.int64)}
        if self.own_source:
            out["source"] = np.zeros(len(samples), np.int64)
        return out

    def close(self) -> None:
        self.closed = True
        if self.close_fails:
            raise OSError(f"{self.name}: close failed")


def test_a_source_with_its_own_source_array_is_refused() -> None:
    mix = Mixture({"a": _Counting("a", own_source=True), "b": _Counting("b")}, [1, 1], batch_size=4)
    with pytest.raises(DataError, match=r"source 'a' returns a 'source' array, which the mix"):
        mix.read(0, np.arange(4, dtype=np.int64))


def test_row_sources_that_mark_ignored_targets_differently_are_refused(tmp_path: Path) -> None:
    # One source given ignore_index=-100 for a Hugging Face loss, another left at the
    # default -1: batches held both in y, and cross_entropy(ignore_index=-100) took -1
    # as a class ("Target -1 is out of bounds", a device-side assert on a GPU).
    rows_dataset(tmp_path, "a", 40, 0)
    rows_dataset(tmp_path, "b", 40, 5000)

    def rows(name: str, **kw: Any) -> PaddedRows:
        return PaddedRows(tmp_path / f"{name}.npy", context=16, **kw)

    with pytest.raises(
        ConfigError,
        match=r"Mixture: sources mark ignored targets \(y, labels\) with different values "
        r"\(ignore_index: -100 in 'sft', -1 in 'chat'\); .*the same ignore_index",
    ):
        Mixture({"sft": rows("a", ignore_index=-100), "chat": rows("b")}, [1, 1], batch_size=8)
    same = {"sft": rows("a", ignore_index=np.int64(-100)), "chat": rows("b", ignore_index=-100)}
    got = Mixture(same, [1, 1], batch_size=8).read(0, np.arange(8, dtype=np.int64))
    assert got["y"].min() >= -100
    # A Mapped source marks ignored targets as its inner source does unless it says
    # otherwise: an fn that rewrites them gives ignore_index= (taken as said, not seen).
    chat = Mapped(rows("b"), _as_minus_100)
    with pytest.raises(ConfigError, match=r"-1 in 'chat'.*Mapped\(source, fn, ignore_index="):
        Mixture({"sft": rows("a", ignore_index=-100), "chat": chat}, [1, 1], batch_size=8)
    chat = Mapped(rows("b"), _as_minus_100, ignore_index=-100)
    mapped = {"sft": rows("a", ignore_index=-100), "chat": chat}
    got = Mixture(mapped, [1, 1], batch_size=8).read(0, np.arange(8, dtype=np.int64))
    assert set(got["y"][got["y"] < 0].tolist()) <= {-100}


@pytest.mark.parametrize("mapped", ["both", "one"])
def test_mapped_table_sources_padding_labels_otherwise_are_refused(
    tmp_path: Path, mapped: str
) -> None:
    # Fails before: Mapped hid its table's ignore_index, so a mixture of two mapped
    # tables padded `labels` with -100 in one source's rows and -1 in the other's, in
    # one batch (cross_entropy(ignore_index=-100) then took -1 as a class).
    path = tmp_path / "sft.parquet"
    pq.write_table(
        pa.table({"input_ids": [[1, 2, 3], [4, 5]], "labels": [[1, 2, 3], [4, 5]]}), path
    )

    def table(ignore: int) -> TableSource:
        return TableSource(path, width=4, ignore_index=ignore)

    a = Mapped(table(-100), _same)
    b = Mapped(table(-1), _same) if mapped == "both" else table(-1)
    assert (a.ignore_index, b.ignore_index) == (-100, -1)
    with pytest.raises(ConfigError, match=r"\(ignore_index: -100 in 'a', -1 in 'b'\)"):
        Mixture({"a": a, "b": b}, [1, 1], batch_size=4)
    mix = Mixture({"a": a, "b": Mapped(table(-100), _same)}, [1, 1], batch_size=4)
    labels = mix.read(0, np.arange(8, dtype=np.int64))["labels"]
    assert set(labels[labels < 0].tolist()) == {-100}
    with pytest.raises(ConfigError, match=r"ignore_index must be an integer.*got True"):
        Mapped(table(-100), _same, ignore_index=True)


def _same(arrays: dict[str, Any], samples: Any) -> dict[str, Any]:
    return arrays


def _as_minus_100(arrays: dict[str, Any], samples: Any) -> dict[str, Any]:
    return {**arrays, "y": np.where(arrays["loss_mask"], arrays["y"], -100).astype(np.int32)}


def _keep_origin(arrays: dict[str, Any], samples: Any) -> dict[str, Any]:
    return {"input_ids": arrays["input_ids"], "origin": arrays["source"]}


def test_a_table_column_named_source_is_refused_with_the_ways_out(tmp_path: Path) -> None:
    # SFT mixtures from the Hub often carry a "source" column (the dataset a row came from).
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from headrace.formats import TableSource

    for name in ("a", "b"):
        ids = pa.array([[1, 2, 3]] * 16, pa.list_(pa.int32()))
        pq.write_table(pa.table({"input_ids": ids, "source": [7] * 16}), tmp_path / f"{name}.pq")
    tables = {n: TableSource(tmp_path / f"{n}.pq", width=4) for n in ("a", "b")}
    with pytest.raises(
        DataError,
        match=r"source 'a' returns a 'source' array, which the mixture adds \(each sample's "
        r"source id\); leave that column out \(TableSource\(columns=\[\.\.\.\]\)\) or rename",
    ):
        Mixture(tables, [1, 1], batch_size=4).read(0, np.arange(4, dtype=np.int64))
    renamed = {n: Mapped(t, _keep_origin) for n, t in tables.items()}
    got = Mixture(renamed, [1, 1], batch_size=4).read(0, np.arange(4, dtype=np.int64))
    assert got["origin"].tolist() == [7] * 4 and sorted(set(got["source"].tolist())) == [0, 1]


def test_close_closes_every_source_then_raises_the_first_failure() -> None:
    srcs = [_Counting("a", close_fails=True), _Counting("b"), _Counting("c", close_fails=True)]
    mix = Mixture(srcs, [1, 1, 1], batch_size=3)
    with pytest.raises(OSError, match=r"^a: close failed$"):
        mix.close()
    assert all(s.closed for s in srcs)


class _Gate:
    """A source wrapper whose reads of samples wait at a shared barrier: reads made
    one after another could never all arrive there together."""

    def __init__(self, inner: PaddedRows, barrier: threading.Barrier) -> None:
        self.inner, self.barrier = inner, barrier

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def read(self, seed: int, samples: np.ndarray) -> dict[str, np.ndarray]:
        if len(samples):
            self.barrier.wait(timeout=30)  # a bound on hanging, not a speed check
        return self.inner.read(seed, samples)


def test_sources_read_side_by_side_and_give_the_batches_read_in_turn(
    sources: dict[str, PaddedRows], monkeypatch: pytest.MonkeyPatch
) -> None:
    with Loader(mixture(sources), batch_size=16, seed=3, prefetch=0, steps=40) as ld:
        want = batch_digest(list(ld))
    barrier = threading.Barrier(3)
    gated = Mixture([_Gate(s, barrier) for s in sources.values()], W3, batch_size=16)
    # A read of 16 steps has samples of all three sources: they meet at the barrier.
    got = gated.read(3, np.arange(16 * 16, dtype=np.int64))
    assert set(np.unique(got["source"]).tolist()) == {0, 1, 2}
    monkeypatch.setattr(_mixture, "_SIDE_BY_SIDE", False)
    with Loader(mixture(sources), batch_size=16, seed=3, prefetch=0, steps=40) as ld:
        assert batch_digest(list(ld)) == want
    monkeypatch.setattr(_mixture, "_SIDE_BY_SIDE", True)
    with Loader(mixture(sources), batch_size=16, seed=3, prefetch=0, steps=40) as ld:
        assert batch_digest(list(ld)) == want


class _Failing:
    def __init__(self, inner: PaddedRows, error: BaseException | None, done: threading.Event):
        self.inner, self.error, self.done = inner, error, done

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def read(self, seed: int, samples: np.ndarray) -> dict[str, np.ndarray]:
        if not len(samples):
            return self.inner.read(seed, samples)
        if self.error is not None:
            raise self.error
        out = self.inner.read(seed, samples)
        time.sleep(0.2)  # slower than the failing sources, so an early raise would show
        self.done.set()
        return out


def test_every_source_read_finishes_before_the_first_failure_is_raised(
    sources: dict[str, PaddedRows],
) -> None:
    done = threading.Event()
    big, mid, tiny = sources.values()
    mix = Mixture(
        [
            _Failing(big, None, done),
            _Failing(mid, OSError(5, "mid failed"), done),
            _Failing(tiny, OSError(5, "tiny failed"), done),
        ],
        W3,
        batch_size=16,
    )
    with pytest.raises(OSError, match="mid failed") as ei:
        mix.read(3, np.arange(16 * 16, dtype=np.int64))
    assert done.is_set()  # the slow source's read was waited for
    assert "1 other source(s) of the mixture failed too" in "".join(ei.value.__notes__)


@pytest.mark.parametrize(
    "weights",
    [
        [0.6, 0.3, 0.1],
        [1.0],
        [0.05, 0.9, 0.03, 0.02, 1e-3],
        [1e-4, 1.0, 1e-4],  # the first and last sources are absent from most steps
        [float(w) for w in range(1, 41)],
    ],
)
@pytest.mark.parametrize("b", [1, 7, 32, 100])
def test_locate_deals_each_step_with_its_own_permutation(weights: list[float], b: int) -> None:
    # All steps' permutations are evaluated at once; the plan is what one
    # permutation per step (the definition) gives, sample for sample.
    from headrace.plan._mixture import _TAG_MIX
    from headrace.plan._permute import Permutation, derive_keys

    plan = MixturePlan(weights, b)
    rng = np.random.default_rng(b)
    samples = np.concatenate(
        [np.arange(5 * b), rng.integers(0, 10**9, 300), np.array([2**40 + 3])]
    ).astype(np.int64)
    steps = samples // b
    for seed in (0, 7, 2**40):
        source, local = plan.locate(seed, samples)
        # The definition, one step at a time (its permutation and counts built once for
        # the step's samples, not once a sample: the same values, a third of the time).
        for t in np.unique(steps).tolist():
            at = np.flatnonzero(steps == t)
            slots = Permutation(b, derive_keys(_TAG_MIX, seed, t))(samples[at] % b)
            base = plan.cumulative(np.array(t * b))
            counts = plan.cumulative(np.array((t + 1) * b)) - base
            ends = np.cumsum(counts)
            for i, slot in zip(at.tolist(), slots.tolist(), strict=True):
                s = int(np.searchsorted(ends, slot, side="right"))
                assert source[i] == s
                assert local[i] == base[s] + slot - (ends[s] - counts[s])


def test_a_state_is_refused_by_the_same_sources_in_another_order(
    sources: dict[str, PaddedRows],
) -> None:
    # Source ids, and the seed each source reads with, follow the mapping's order: the
    # same sources and weights in another order are another stream. A state's digest
    # sorted the mapping's keys, so the swap was resumed without a word.
    two = {"big": sources["big"], "mid": sources["mid"]}
    swapped = {"mid": sources["mid"], "big": sources["big"]}
    with Loader(Mixture(two, [1, 1], batch_size=16), batch_size=16, seed=3) as ld:
        state = ld.state_dict()
        first = batch_digest([ld.batch_at(0)])
    with Loader(Mixture(swapped, [1, 1], batch_size=16), batch_size=16, seed=3) as other:
        assert batch_digest([other.batch_at(0)]) != first
        with pytest.raises(StateError, match="what differs: order"):
            other.load_state_dict(state)
    with Loader(Mixture(dict(two), [1, 1], batch_size=16), batch_size=16) as same:
        same.load_state_dict(state)
        assert batch_digest([same.batch_at(0)]) == first


def test_a_state_saved_before_the_order_was_described_still_loads(
    sources: dict[str, PaddedRows],
) -> None:
    # Such a state could not tell the order; it resumes as it did then.
    mix = Mixture({"mid": sources["mid"], "big": sources["big"]}, [1, 2], batch_size=16)
    with Loader(mix, batch_size=16, seed=3) as ld:
        state = ld.state_dict()
    described = {k: v for k, v in mix.fingerprint().items() if k != "order"}
    old = {**state, "fingerprint": fingerprint_digest(described)}
    old["parts"] = fingerprint_parts(described)
    with Loader(mix, batch_size=16) as ld:
        ld.load_state_dict(old)
        assert ld.seed == 3
        with pytest.raises(StateError, match="what differs: weights"):
            ld.load_state_dict(
                {**old, "fingerprint": "0" * 32, "parts": {**old["parts"], "weights": "x"}}
            )


def test_weights_by_name(sources: dict[str, PaddedRows]) -> None:
    # A dict of weights beside a dict of sources failed in NumPy with "float() argument
    # must be a string or a real number, not 'dict'".
    by_name = Mixture(sources, {"tiny": 0.1, "big": 0.6, "mid": 0.3}, batch_size=16)
    assert by_name.fingerprint() == mixture(sources).fingerprint()
    names = list(sources)
    with pytest.raises(ConfigError) as exc:
        Mixture(sources, {"huge": 0.1, "big": 0.6, "mid": 0.3}, batch_size=16)
    assert str(exc.value) == (
        f"Mixture: weights name ['huge', 'big', 'mid'] but the sources are {names} "
        "(unknown: ['huge']; missing: ['tiny']); give one weight per source name."
    )
    with pytest.raises(ConfigError) as exc:  # it said "weights name []"
        Mixture(sources, {"big": 0.6, "mid": 0.3}, batch_size=16)
    assert str(exc.value) == (
        f"Mixture: weights name ['big', 'mid'] but the sources are {names} "
        "(missing: ['tiny']); give one weight per source name."
    )
    with pytest.raises(ConfigError, match="weights by name need sources by name"):
        Mixture(list(sources.values()), {"0": 1, "1": 1, "2": 1}, batch_size=16)
    with pytest.raises(ConfigError, match="weights must be a list of numbers"):
        Mixture(sources, "0.5,0.5,1", batch_size=16)  # type: ignore[arg-type]


def test_weights_as_an_array_of_any_scale(sources: dict[str, PaddedRows]) -> None:
    # A NumPy array (token counts, normalised) was refused as "not a list of numbers";
    # weights whose sum overflows float64 quantised to (1, 1, 1), not summing to 2**16,
    # and a Python int beyond float64 raised OverflowError instead of ConfigError.
    want = Mixture(sources, [0.5, 0.3, 0.2], batch_size=16).fingerprint()
    as_array = Mixture(sources, np.array([0.5, 0.3, 0.2]), batch_size=16)
    assert as_array.fingerprint() == want
    assert Mixture(sources, np.array([5, 3, 2]), batch_size=16).fingerprint() == want
    assert quantize_weights([1e308, 1e308, 1e308]) == quantize_weights([1, 1, 1])
    huge = Mixture(sources, [1e308, 6e307, 4e307], batch_size=16)  # sums past float64
    assert huge.fingerprint() == want
    with pytest.raises(ConfigError, match=r"weights must be finite and > 0"):
        Mixture(sources, [10**400, 1, 1], batch_size=16)
    with pytest.raises(ConfigError, match=r"one per source.*\(got ndarray of shape \(3, 1\)"):
        Mixture(sources, np.ones((3, 1)), batch_size=16)  # type: ignore[arg-type]
    for bad in (["0.6", "0.3", "0.1"], [True, True, True]):
        with pytest.raises(ConfigError, match=r"weights must be numbers"):
            Mixture(sources, bad, batch_size=16)  # type: ignore[arg-type]


def test_source_names_that_collide_as_strings_are_refused(
    sources: dict[str, PaddedRows],
) -> None:
    # {0: a, "0": b} named both sources "0": the fingerprint kept one of them (a state
    # loaded over the other one changed), and weights {0: 1, "0": 3} gave both 3.
    a, b = sources["big"], sources["mid"]
    with pytest.raises(ConfigError, match=r"source names must differ as strings.*'0'"):
        Mixture({0: a, "0": b}, [1, 3], batch_size=16)  # type: ignore[dict-item]
    with pytest.raises(ConfigError, match=r"weights name '0' twice"):
        Mixture({"0": a, "1": b}, {0: 1, "0": 3, "1": 1}, batch_size=16)  # type: ignore[dict-item]


def test_token_sources_of_two_dtypes_are_refused_naming_the_dtypes(tmp_path: Path) -> None:
    # uint16 and uint32 token files in one mixture: refused at the first batch, but the
    # message said "differ in shape" for (16,) and (16,).
    np.arange(500, dtype=np.uint16).tofile(tmp_path / "a.bin")
    np.arange(500, dtype=np.uint32).tofile(tmp_path / "b.bin")
    u16 = TokenSource(tmp_path / "a.bin", dtype="uint16", context=16)
    u32 = TokenSource(tmp_path / "b.bin", dtype="uint32", context=16)
    mix = Mixture({"u16": u16, "u32": u32}, [1, 1], batch_size=8)
    with (
        Loader(mix, batch_size=8, prefetch=0) as loader,
        pytest.raises(DataError, match=r"differ in dtype: 'u32' gives \{x: uint32 \(16,\)") as e,
    ):
        next(iter(loader))
    # The way out named is Mapped's: a TokenSource's dtype= is its files', not its output's.
    assert "same dtype=" not in str(e.value) and "Mapped(source, fn)" in str(e.value)
    short = TokenSource(tmp_path / "a.bin", dtype="uint16", context=8)
    mix = Mixture({"u16": u16, "short": short}, [1, 1], batch_size=8)
    with pytest.raises(DataError, match=r"differ in per-sample shape: 'short' gives"):
        mix.read(0, np.arange(8, dtype=np.int64))


class _ShortRows:
    """A source of one's own that returns a row too few."""

    def fingerprint(self) -> dict[str, Any]:
        return {"kind": "short"}

    def read(self, seed: int, samples: np.ndarray) -> dict[str, np.ndarray]:
        rows = np.zeros((max(len(samples) - 1, 0), 17), dtype=np.int32)
        return {"x": rows[:, :-1], "y": rows[:, 1:]}


def test_a_mixed_source_returning_the_wrong_rows_is_named(tmp_path: Path) -> None:
    # A Loader names a source whose arrays do not hold one row per sample (ConfigError);
    # mixed, the same source failed in NumPy ("shape mismatch: value array of shape
    # (3,16) could not be broadcast ..."), naming neither the source nor the key.
    np.arange(5000, dtype=np.int32).tofile(tmp_path / "t.bin")
    tokens = TokenSource(tmp_path / "t.bin", dtype="int32", context=16)
    mix = Mixture({"tokens": tokens, "mine": _ShortRows()}, [1, 1], batch_size=8)
    with pytest.raises(
        ConfigError, match=r"source 'mine' \(_ShortRows\) of the mixture returned 'x' with shape"
    ):
        mix.read(0, np.arange(8, dtype=np.int64))
    mix.close()


def test_a_weight_below_zero_is_refused_naming_its_source(
    sources: dict[str, PaddedRows],
) -> None:
    for bad, shown in ((-0.1, "-0.1"), (float("nan"), "nan"), (float("inf"), "inf")):
        with pytest.raises(ConfigError, match=rf"source 'mid' has weight {shown}: .*>= 0"):
            Mixture(sources, {"big": 0.6, "mid": bad, "tiny": 0.1}, batch_size=8)
    with pytest.raises(ConfigError, match=r"source '1' has weight -1: "):
        Mixture(list(sources.values()), [1, -1, 2], batch_size=8)
    with pytest.raises(ConfigError, match=r"source 'tiny' has weight 1e-09, below 1/65536"):
        Mixture(sources, [1.0, 1.0, 1e-9], batch_size=8)
    with pytest.raises(ConfigError, match=r"at least one weight must be > 0"):
        Mixture(sources, [0, 0.0, 0], batch_size=8)


def test_a_source_of_weight_zero_is_never_read(sources: dict[str, PaddedRows]) -> None:
    # A config that switches a source off with weight 0 keeps the others' ids and seeds.
    mix = Mixture(sources, {"big": 0.7, "mid": 0.0, "tiny": 0.3}, batch_size=16)
    assert mix.plan.numerators[1] == 0
    counts = mix.plan.step_counts(np.arange(10**6, 10**6 + 50))
    assert (counts[:, 1] == 0).all() and (counts.sum(axis=1) == 16).all()
    with Loader(mix, batch_size=16, seed=3, steps=20) as ld:
        seen = np.concatenate([b["source"] for b in ld])
    assert set(seen.tolist()) == {0, 2}
    assert abs(np.mean(seen == 2) - 0.3) < 0.05
