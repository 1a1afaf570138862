"""A curriculum: ``Mixture(..., schedule={k: weights})`` changes the weights at step ``k``
and every source goes on from the sample it had reached, none skipped or read twice.

Before it, the only way to switch was to start a loader with the new weights at the
saved step (docs/long-runs.md), whose counts are those of a run that had used the new
weights from step 0: a source given more weight skipped ahead, one given less repeated.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headrace.errors import ConfigError, StateError
from headrace.formats import TokenSource, write_megatron_index
from headrace.pipeline import Loader, Mixture
from headrace.plan import MixturePlan
from headrace.testing import assert_resume_exact, batch_digest

L = 16
B = 16
K = 7  # the step the weights change at
W1 = {"web": 0.6, "code": 0.2, "math": 0.1, "books": 0.1}
W2 = {"web": 0.3, "code": 0.3, "math": 0.3, "books": 0.1}


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    """Megatron int32 files whose every token is its own offset plus a source's base:
    a sample's first token says which source and where."""
    out = {}
    for i, (name, n) in enumerate(
        {"web": 40_000, "code": 9_000, "math": 3_000, "books": 600}.items()
    ):
        path = tmp_path / f"{name}.bin"
        (np.arange(n, dtype=np.int32) + i * 1_000_000).tofile(path)
        write_megatron_index(path.with_suffix(".idx"), np.int32, np.array([n]))
        out[name] = path
    return out


def mixture(files: dict[str, Path], weights: dict[str, float], **kw: object) -> Mixture:
    srcs = {k: TokenSource(p, context=L, window_bytes=4096) for k, p in files.items()}
    return Mixture(srcs, weights, batch_size=B, **kw)  # type: ignore[arg-type]


def local_samples(mix: Mixture, seed: int, steps: range) -> dict[int, list[int]]:
    """Each source's local sample numbers over ``steps``, in order."""
    samples = np.arange(steps.start * B, steps.stop * B, dtype=np.int64)
    source, local = mix.plan.locate(seed, samples)
    return {s: sorted(local[source == s].tolist()) for s in range(mix.plan.sources)}


def test_each_source_goes_on_from_where_it_was(files: dict[str, Path]) -> None:
    before = mixture(files, W1)
    after = mixture(files, W1, schedule={K: W2})
    first = local_samples(before, 5, range(K))
    assert local_samples(after, 5, range(K)) == first  # the past is the run's
    then = local_samples(after, 5, range(K, K + 20))
    for s in range(4):
        got = first[s] + then[s]
        assert got == list(range(len(got))), f"source {s} skipped or repeated samples"
    # The new weights hold from K on: per-step counts as a plan of W2 alone deals them.
    counts = after.plan.step_counts(np.arange(K, K + 20))
    assert (counts.sum(axis=1) == B).all() and (counts >= 0).all()
    assert np.array_equal(
        after.plan.step_counts(np.arange(K)), before.plan.step_counts(np.arange(K))
    )
    plain = MixturePlan(list(W2.values()), B).step_counts(np.arange(K, K + 20))
    assert np.abs(counts.sum(axis=0) - plain.sum(axis=0)).max() <= 2
    before.close()
    after.close()


def test_switching_a_saved_run_goes_on_with_the_same_past(files: dict[str, Path]) -> None:
    # A run of W1 saved at K, resumed with the schedule: the steps before K it saw are the
    # schedule's (so a state of the schedule loaded at K continues it), and from K on the
    # batches are the schedule's straight run.
    with Loader(mixture(files, W1), batch_size=B, seed=5, steps=K) as ld:
        past = batch_digest(ld)
    with Loader(mixture(files, W1, schedule={K: W2}), batch_size=B, seed=5, steps=K) as ld:
        assert batch_digest(ld) == past
    with Loader(mixture(files, W1, schedule={K: W2}), batch_size=B, seed=5, steps=K + 12) as ld:
        straight = [b["x"][:, 0].copy() for b in ld]
    resumed = Loader(mixture(files, W1, schedule={K: W2}), batch_size=B, seed=5, steps=K + 12)
    state = resumed.state_dict()
    state["step"] = K
    resumed.load_state_dict(state)
    with resumed:
        got = [b["x"][:, 0].copy() for b in resumed]
    assert all(np.array_equal(a, b) for a, b in zip(got, straight[K:], strict=True))


def test_a_schedule_resumes_exactly_across_its_switches(files: dict[str, Path]) -> None:
    def make() -> Loader:
        mix = mixture(files, W1, schedule={3: W2, 9: W1})
        return Loader(mix, batch_size=B, seed=2, steps=16, world_size=2, rank=1, prefetch=0)

    assert_resume_exact(make, steps=16, resume_at=[0, 2, 3, 4, 8, 9, 10, 15])


def test_a_state_of_the_weights_alone_is_refused_by_a_schedule(files: dict[str, Path]) -> None:
    with Loader(mixture(files, W1), batch_size=B, seed=5) as ld:
        saved = ld.state_dict()
    with Loader(mixture(files, W1, schedule={K: W2}), batch_size=B, seed=5) as ld:
        assert "schedule" in ld.source.fingerprint()
        with pytest.raises(StateError, match="what differs: schedule"):
            ld.load_state_dict(saved)
    # Without a schedule the description is what it always was: old states load.
    assert "schedule" not in mixture(files, W1).fingerprint()


def test_far_steps_of_a_schedule_cost_nothing(files: dict[str, Path]) -> None:
    plan = MixturePlan([0.6, 0.4], B, schedule={10**6: [0.1, 0.9], 10**7: [0.5, 0.5]})
    n = np.array([0, 10**6 * B, 10**7 * B, 2**40 * B], dtype=np.int64)
    c = plan.cumulative(n)
    assert (c.sum(axis=1) == n).all()
    a = MixturePlan([0.6, 0.4], B).cumulative(10**6 * B)
    b = MixturePlan([0.1, 0.9], B).cumulative(np.array([10**6 * B, 10**7 * B]))
    assert np.array_equal(c[2], a + b[1] - b[0])


@pytest.mark.parametrize(
    ("schedule", "match"),
    [
        ({0: W2}, r"schedule steps must be integers > 0"),
        ({-3: W2}, r"schedule steps must be integers > 0"),
        ({2.5: W2}, r"schedule steps must be integers > 0"),
        ({True: W2}, r"schedule steps must be integers > 0"),
        ({4: {"web": 1.0}}, r"step 4: .*missing: \['books', 'code', 'math'\]"),
        ({4: {**W2, "code": -1.0}}, r"step 4: source 'code' has weight -1.0"),
        ([(4, W2)], r"schedule must be a dict"),
        ({4: [1.0, 2.0]}, r"step 4: .*2 weights for 4 sources; give one weight per source"),
    ],
)
def test_bad_schedules_are_refused_naming_the_step(
    files: dict[str, Path], schedule: object, match: str
) -> None:
    with pytest.raises(ConfigError, match=match):
        mixture(files, W1, schedule=schedule)


def test_a_source_can_enter_and_leave_with_weight_0(files: dict[str, Path]) -> None:
    # Code only from step K; books left out from step K + 5: ids and seeds stay put.
    start = {**W1, "code": 0.0}
    mix = mixture(files, start, schedule={K: W2, K + 5: {**W2, "books": 0}})
    counts = mix.plan.step_counts(np.arange(K + 20))
    assert (counts[:K, 1] == 0).all() and (counts[K:, 1] > 0).any()
    assert (counts[K + 5 :, 3] == 0).all() and (counts[K : K + 5, 3] > 0).any()
    seen = local_samples(mix, 1, range(K + 20))
    assert seen[1] == list(range(len(seen[1])))  # code starts at its sample 0
    with Loader(mix, batch_size=B, seed=1, steps=K + 20) as ld:
        got = np.concatenate([b["source"] for b in ld]).reshape(K + 20, B)
    assert not (got[:K] == 1).any() and not (got[K + 5 :] == 3).any()


def test_a_worker_copy_reads_the_schedule_s_batches(files: dict[str, Path]) -> None:
    # Data-loader workers read pickled copies of the mixture: the phases travel with it.
    mix = mixture(files, W1, schedule={K: W2})
    copy = pickle.loads(pickle.dumps(mix))
    samples = np.arange((K - 1) * B, (K + 2) * B, dtype=np.int64)
    assert copy.plan.schedule == mix.plan.schedule
    assert np.array_equal(copy.read(4, samples)["x"], mix.read(4, samples)["x"])
    mix.close()
    copy.close()


def test_a_schedule_is_shown_in_the_mixture_s_repr(files: dict[str, Path]) -> None:
    w = {"web": 3, "code": 1, "math": 0, "books": 0}
    shown = repr(mixture(files, w, schedule={100: [1, 1, 2, 0]}))
    assert "batch_size=16, schedule={100: [0.25, 0.25, 0.5, 0]})" in shown
    assert "'web': " in shown and " x 0.75" in shown
    assert repr(mixture(files, w)).endswith(" x 0}, batch_size=16)")


def _state_after_k_steps(files: dict[str, Path]) -> dict[str, Any]:
    """The state of a run of the ``W1`` mixture (seed 5) after its first ``K`` steps."""
    with Loader(mixture(files, W1), batch_size=B, seed=5, steps=K) as run:
        for _ in run:
            pass
        return run.state_dict()


def test_a_state_refused_for_other_weights_names_them_and_the_schedule_way_on(
    files: dict[str, Path],
) -> None:
    # It said only "what differs: weights", and offered the way on that skips or repeats
    # samples (this loader's own state at the saved step), not the schedule that does not.
    saved = _state_after_k_steps(files)
    with Loader(mixture(files, W2), batch_size=B) as other, pytest.raises(StateError) as exc:
        other.load_state_dict(saved)
    msg = str(exc.value)
    assert "; what differs: weights): weights.web: 0.6 when the state was saved, 0.3 now; " in msg
    assert "weights.math: 0.1 when the state was saved, 0.3 now. Same files" in msg
    assert "books" not in msg  # 0.1 both ways
    assert msg.endswith(
        "or, to go on with these weights from this step, each source from the sample it had "
        "reached (none skipped or read twice), make the Mixture with the saved weights and "
        f"schedule={{{K}: new_weights}}, and load that loader's own state_dict() with 'step' "
        f'set to {K} (docs/long-runs.md, "A curriculum"); loaded into this loader at that '
        "step instead, each source would go on where these weights would have brought it, "
        "skipping or repeating samples"
    )
    # The way it names goes on as the run planned with the switch from the start does.
    with Loader(mixture(files, W1, schedule={K: W2}), batch_size=B, seed=5) as on:
        state = on.state_dict()
        on.load_state_dict({**state, "step": saved["step"]})
        got = [batch_digest([b]) for _, b in zip(range(4), on, strict=False)]
    with Loader(mixture(files, W1, schedule={K: W2}), batch_size=B, seed=5, steps=K + 4) as ref:
        assert got == [batch_digest([b]) for b in ref][K:]
    # A state saved before weights were named: no weights told, none "not set".
    parts = dict(saved["parts"])
    named = {
        k: v for k, v in json.loads(parts["settings:named"]).items() if not k.startswith("weights.")
    }
    parts["settings:named"] = json.dumps(named)
    with Loader(mixture(files, W2), batch_size=B) as other, pytest.raises(StateError) as exc:
        other.load_state_dict({**saved, "parts": parts})
    assert "what differs: weights). Same files" in str(exc.value)


def test_a_state_refused_for_a_schedule_added_later_names_the_exact_way_on(
    files: dict[str, Path],
) -> None:
    # It said "in this data's order: the epoch in progress is shuffled anew, so some
    # samples repeat and some are skipped", which a schedule switching later never does.
    saved = _state_after_k_steps(files)
    later = mixture(files, W1, schedule={K + 2: W2})
    with Loader(later, batch_size=B) as other, pytest.raises(StateError) as exc:
        other.load_state_dict(saved)
    # Each switch's weights are named since 2026-12-07 (tests/plan/test_schedule_named_s51.py).
    assert f"what differs: schedule): schedule.{K + 2}.web: no switch when" in str(exc.value)
    assert str(exc.value).endswith(
        f" now. Same files, sizes, dtypes, sampling config and host order "
        f"are required to resume: give the run the data it was saved with; or, to go on with "
        f"this schedule, if its switches come at step {K} or later, load this loader's own "
        f"state_dict() with 'step' set to {K}: the steps before its first switch are the "
        f'saved run\'s, so it goes on exactly (docs/long-runs.md, "A curriculum"); after a '
        f"switch before step {K}, the sources would go on where it would have brought them, "
        "skipping or repeating samples"
    )
    with Loader(mixture(files, W1, schedule={K + 2: W2}), batch_size=B, seed=5) as on:
        on.load_state_dict({**on.state_dict(), "step": K})
        got = [batch_digest([b]) for _, b in zip(range(4), on, strict=False)]
    with Loader(mixture(files, W1, schedule={K + 2: W2}), batch_size=B, seed=5, steps=K + 4) as ref:
        assert got == [batch_digest([b]) for b in ref][K:]
    with Loader(mixture(files, W1), batch_size=B, seed=5, steps=K + 2) as plain:
        assert got[:2] == [batch_digest([b]) for b in plain][K:]  # the saved run's, to K + 2
