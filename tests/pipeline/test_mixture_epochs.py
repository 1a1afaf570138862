"""How many steps one epoch of each mixed source takes, in closed form (no I/O)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from headrace.errors import ConfigError
from headrace.formats import PaddedRows
from headrace.pipeline import Loader, Mixture
from headrace.plan import MixturePlan

SCHEDULES = [None, {3: [0.2, 0.0, 0.8, 0.0, 1.0]}, {2: [1, 1, 1, 1, 1], 9: [0, 0, 0, 0, 1]}]


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("batch", [1, 7, 512])
def test_one_sources_count_is_its_column_of_the_whole_tree(schedule: object, batch: int) -> None:
    rng = np.random.default_rng(batch)
    plan = MixturePlan([0.5, 0.01, 0.0, 0.3, 0.19], batch, schedule=schedule)  # type: ignore[arg-type]
    n = np.concatenate([[0, 1, 2 * batch, 3 * batch, 9 * batch], rng.integers(0, 2**40, 200)])
    whole = plan.cumulative(n)
    for s in range(plan.sources):
        assert np.array_equal(plan.cumulative_of(s, n), whole[:, s])
    assert np.array_equal(plan.cumulative_of(np.arange(5), 10**6), plan.cumulative(10**6))


@pytest.mark.parametrize("sources", [1, 2, 3, 6, 17])
def test_first_steps_are_the_fewest_that_reach_the_counts(sources: int) -> None:
    rng = np.random.default_rng(sources)
    plan = MixturePlan(rng.random(sources) + 0.02, 32)
    want = rng.integers(1, 10**7, sources)
    first = plan.first_steps(want)
    at = plan.cumulative(first * 32)  # row i: every source's counts at source i's step
    before = plan.cumulative((first - 1) * 32)
    every = np.arange(sources)
    assert (at[every, every] >= want).all() and (before[every, every] < want).all()
    assert plan.first_steps(np.zeros(sources, dtype=np.int64)).tolist() == [0] * sources


def test_a_source_weighted_0_at_the_end_never_gets_there() -> None:
    plan = MixturePlan([0.5, 0.5], 8, schedule={4: [1.0, 0.0]})
    first = plan.first_steps([100, 16])  # source 1 gets 16 samples in steps 0-3, then none
    assert first[1] == 4 and first[0] > 4
    assert plan.first_steps([100, 17]).tolist()[1] == -1


def rows(root: Path, name: str, n: int) -> PaddedRows:
    rng = np.random.default_rng(n)
    np.save(root / f"{name}.npy", rng.integers(1, 100, (n, 17), dtype=np.uint16))
    return PaddedRows(root / f"{name}.npy", context=16, empty_rows="keep")


@pytest.fixture
def mix(tmp_path: Path) -> Mixture:
    return Mixture(
        {"chat": rows(tmp_path, "chat", 1000), "math": rows(tmp_path, "math", 130)},
        [0.9, 0.1],
        batch_size=32,
    )


def test_epoch_steps_are_what_a_loader_reads(mix: Mixture) -> None:
    steps = mix.epoch_steps()
    assert steps == {"chat": 35, "math": 41}
    seen = np.zeros(2, dtype=np.int64)
    reached: dict[str, int] = {}
    with Loader(mix, batch_size=32, steps=41) as loader:  # real reads, source ids counted
        for t, batch in enumerate(loader, start=1):
            seen += np.bincount(batch["source"], minlength=2)
            for s, name in enumerate(mix.names):
                if seen[s] >= len(mix.sources[s]) and name not in reached:  # type: ignore[arg-type]
                    reached[name] = t
    assert reached == steps
    three = mix.epoch_steps(3)
    assert three["chat"] == 105 and 3 * 41 - 2 <= three["math"] <= 3 * 41 + 2
    with Loader(mix, batch_size=32, epochs=1) as exact:  # ends when every source has one
        assert len(exact) == max(steps.values())


def test_epochs_at_counts_what_each_source_has_read(mix: Mixture) -> None:
    assert mix.epochs_at(0) == {"chat": 0.0, "math": 0.0}
    at = mix.epochs_at(35)
    counts = mix.plan.cumulative(35 * 32)
    assert at == {"chat": counts[0] / 1000, "math": counts[1] / 130}
    assert at["chat"] >= 1.0 > mix.epochs_at(34)["chat"]


def test_a_source_that_stops_never_completes_an_epoch(tmp_path: Path) -> None:
    sources = {"a": rows(tmp_path, "a", 200), "b": rows(tmp_path, "b", 200)}
    mix = Mixture(sources, [0.5, 0.5], batch_size=16, schedule={3: {"a": 1.0, "b": 0.0}})
    steps = mix.epoch_steps()
    assert steps["b"] is None and steps["a"] is not None and steps["a"] > 3
    assert mix.epochs_at(100)["b"] == 24 / 200  # what steps 0-2 gave it


def test_a_mixture_says_why_it_has_no_samples_per_epoch(mix: Mixture) -> None:
    with pytest.raises(AttributeError, match=r"a Mixture has no samples_per_epoch: each source"):
        _ = mix.samples_per_epoch
    assert getattr(mix, "samples_per_epoch", None) is None  # as for any source without one


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "1"])
def test_bad_epochs_and_steps_are_refused(mix: Mixture, bad: object) -> None:
    with pytest.raises(ConfigError, match="epochs must be an integer >= 1"):
        mix.epoch_steps(bad)  # type: ignore[arg-type]
    if bad != 0:
        with pytest.raises(ConfigError, match="step must be an integer >= 0"):
            mix.epochs_at(bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"passes 2\*\*63 - 1 samples"):
        mix.epochs_at(2**62)
    with pytest.raises(ConfigError, match=r"passes 2\*\*63 - 1 samples"):
        mix.epoch_steps(2**62)
