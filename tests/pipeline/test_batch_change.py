"""Resume with another global batch size: the run goes on at the first sample it had not
read, at its own step (batch-size ramp-up; a restart on other nodes with a fixed batch
per device). Token files, padded rows and NPY files written here, read for real."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headrace.errors import ConfigError, StateError
from headrace.formats import (
    FileSource,
    PaddedRows,
    TokenSource,
    synthetic_arrays,
    write_sample_file,
)
from headrace.pipeline import Loader, Mixture
from headrace.plan import PLAN_VERSION, LoaderState, array_state
from headrace.plan._state import ORIGIN_VERSION

SEED = 5
Make = Callable[[], Any]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("batch_change")
    rng = np.random.default_rng(1)
    rng.integers(0, 1000, 30_000, dtype=np.uint32).tofile(root / "a.bin")
    rng.integers(0, 1000, 9_001, dtype=np.uint32).tofile(root / "b.bin")
    tok = rng.integers(1, 1000, (150, 12), dtype=np.uint16)
    tok[np.arange(12) >= rng.integers(2, 13, 150)[:, None]] = 0
    np.save(root / "rows.npy", tok)
    np.save(root / "mask.npy", (tok != 0).astype(np.uint8))
    (root / "files").mkdir()
    for i in range(37):
        arrays = synthetic_arrays("npy", seed=i, shape=(3, 4), samples_per_file=1)
        write_sample_file("npy", root / "files" / f"f{i:02d}.npy", arrays)
    return root


def makers(root: Path) -> dict[str, Make]:
    return {
        "tokens": lambda: TokenSource(
            [root / "a.bin", root / "b.bin"],
            dtype="uint32",
            context=16,
            window_bytes=16 * 1024,
            block_bytes=4096,
        ),
        "rows": lambda: PaddedRows(root / "rows.npy", root / "mask.npy", context=8, truncate=True),
        "files": lambda: FileSource(root / "files", format="npy"),
    }


@pytest.fixture(params=["tokens", "rows", "files"])
def make(request: pytest.FixtureRequest, root: Path) -> Make:
    return makers(root)[request.param]


def run(make: Make, legs: list[tuple[int, int]], **kw: Any) -> tuple[list[dict], dict]:
    """Batches of loaders of batch ``b`` for ``n`` steps each, each resumed from the last
    one's state (through JSON, as a checkpoint keeps it); the last state."""
    out: list[dict] = []
    state: dict | None = None
    for b, n in legs:
        with Loader(make(), batch_size=b, seed=SEED, prefetch=0, **kw) as ld:
            if state is not None:
                ld.load_state_dict(json.loads(json.dumps(state)))
            ld.steps = ld.step + n
            out += list(ld)
            state = ld.state_dict()
    assert state is not None
    return out, state


def expected(make: Make, legs: list[tuple[int, int]]) -> list[dict]:
    """The source's own reads of samples 0, 1, ... split at the legs' steps."""
    total = sum(b * n for b, n in legs)
    src = make()
    try:
        whole = src.read(SEED, np.arange(total, dtype=np.int64))
    finally:
        src.close()
    sizes = [b for b, n in legs for _ in range(n)]
    cuts = np.cumsum(sizes)[:-1]
    return [
        dict(zip(whole, parts, strict=True))
        for parts in zip(*(np.split(a, cuts) for a in whole.values()), strict=True)
    ]


def assert_same(got: list[dict], want: list[dict]) -> None:
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g.keys() == w.keys()
        for k in g:
            np.testing.assert_array_equal(g[k], w[k], err_msg=f"step {i}, {k!r}")


def test_another_batch_size_goes_on_at_the_first_sample_not_read(make: Make) -> None:
    legs = [(8, 5), (16, 5)]
    got, state = run(make, legs)
    assert_same(got, expected(make, legs))
    # The step counter goes on (the training loop's own); the origin says where 16 began.
    assert state["step"] == 10 and state["batch_size"] == 16
    assert state["origin"] == {"step": 5, "sample": 40}
    assert LoaderState.from_dict(state).consumed == 40 + 5 * 16


def test_a_ramp_4_8_16_reads_the_stream_in_order(make: Make) -> None:
    legs = [(4, 3), (8, 3), (16, 3)]
    got, state = run(make, legs)
    assert_same(got, expected(make, legs))
    assert state["origin"] == {"step": 6, "sample": 4 * 3 + 8 * 3}


def test_a_state_of_one_batch_size_is_as_before(make: Make) -> None:
    _, state = run(make, [(8, 3)])
    assert "origin" not in state  # unchanged: same dict, same keys as saved before origins
    _, again = run(make, [(8, 3), (8, 2)])
    assert "origin" not in again and again["step"] == 5


def test_hosts_after_the_change_make_the_same_global_batches(make: Make) -> None:
    one, state = run(make, [(8, 4), (16, 3)])
    saved = run(make, [(8, 4)])[1]
    halves = []
    for rank in (0, 1):
        with Loader(make(), batch_size=16, seed=SEED, rank=rank, world_size=2, steps=7) as ld:
            ld.load_state_dict(saved)
            halves.append(list(ld))
    for t, (a, b) in enumerate(zip(*halves, strict=True)):
        for k in a:
            np.testing.assert_array_equal(np.concatenate([a[k], b[k]]), one[4 + t][k])
    # ... and each host's state says the same: any world size resumes it.
    assert state["origin"] == {"step": 4, "sample": 32}


def test_a_state_saved_after_the_change_goes_on_identically(make: Make) -> None:
    straight, _ = run(make, [(8, 3), (16, 4)])
    first, state = run(make, [(8, 3), (16, 2)])
    assert state["origin"] == {"step": 3, "sample": 24}
    text = json.dumps(state)  # the origin survives JSON (and array_state, below)
    for saved in (json.loads(text), array_state(state)):
        with Loader(make(), batch_size=16, seed=SEED, prefetch=0, steps=7) as ld:
            ld.load_state_dict(saved)
            assert ld.origin == (3, 24)
            assert_same(first + list(ld), straight)
            assert ld.state_dict()["origin"] == state["origin"]


def test_batch_at_reads_on_from_the_origin_and_refuses_steps_before_it(root: Path) -> None:
    make = makers(root)["tokens"]
    _, state = run(make, [(8, 3)])
    with Loader(make(), batch_size=16, seed=SEED, prefetch=2, chunk_steps=2, steps=9) as ld:
        ld.load_state_dict(state)
        got = list(ld)  # read ahead by a thread, in chunks: the same batches
        assert_same(got, [ld.batch_at(t) for t in range(3, 9)])
        with pytest.raises(ConfigError, match=r"step 2 comes before step 3, where .* of 16"):
            ld.batch_at(2)


def test_host_order_address_after_the_change(root: Path) -> None:
    make = makers(root)["tokens"]
    _, saved = run(make, [(8, 2)], host_order="address")
    plan, _ = run(make, [(8, 2), (16, 2)])
    parts = []
    for rank in (0, 1):
        kw = {"rank": rank, "world_size": 2, "host_order": "address", "steps": 4}
        with Loader(make(), batch_size=16, seed=SEED, **kw) as ld:  # type: ignore[arg-type]
            ld.load_state_dict(saved)
            parts.append(list(ld))
    for t, (a, b) in enumerate(zip(*parts, strict=True)):
        # Sorted by where each sample lies: the same samples as the plan's order.
        got = np.concatenate([a["x"], b["x"]])
        want = plan[2 + t]["x"]
        assert sorted(map(bytes, got)) == sorted(map(bytes, want))


def test_a_mixture_refuses_another_batch_size(root: Path) -> None:
    make = makers(root)["rows"]

    def mix(b: int) -> Mixture:
        return Mixture([make(), make()], [0.5, 0.5], batch_size=b)

    with Loader(mix(8), batch_size=8, seed=SEED, steps=2) as ld:
        list(ld)
        state = ld.state_dict()
    with (
        Loader(mix(16), batch_size=16, seed=SEED) as ld,
        pytest.raises(
            StateError,
            match=r"saved with global batch size 8, this loader has 16; .*Mixture.* "
            r"resume it with batch_size=8",
        ),
    ):
        ld.load_state_dict(state)


def test_an_exact_pass_refuses_another_batch_size_or_a_changed_state(root: Path) -> None:
    make = makers(root)["files"]
    with Loader(make(), batch_size=8, seed=SEED, epochs=1) as ld:  # a pass's own state
        it = iter(ld)
        next(it), next(it)
        state = ld.state_dict()
    with (
        Loader(make(), batch_size=16, seed=SEED, epochs=1) as ld,
        pytest.raises(
            StateError, match=r"this loader has 16; this loader cannot .*exact pass \(epochs=1\)"
        ),
    ):
        ld.load_state_dict(state)
    _, changed = run(make, [(8, 2), (16, 1)])
    with (
        Loader(make(), batch_size=16, seed=SEED, epochs=1) as ld,
        pytest.raises(
            # A training run's state (changed batch size or not): no state of this pass.
            StateError,
            match=r"training run's \(saved by a loader without epochs=, at step 3\)",
        ),
    ):
        ld.load_state_dict(changed)


@pytest.mark.parametrize(
    ("origin", "message"),
    [
        ([3, 24], r"has origin \[3, 24\]; expected a dict of 'step' and 'sample'"),
        ({"step": 3}, r"has origin \{'step': 3\}; expected a dict"),
        ({"step": 3, "sample": 2.5}, r"has origin sample 2.5; expected an integer"),
        ({"step": 9, "sample": 24}, r"out of range: origin step 9, sample 24 \(expected step"),
        ({"step": 3, "sample": -1}, r"out of range: origin step 3, sample -1"),
        ({"step": 3, "sample": 2**63 - 10}, r"out of range: origin step 3"),
    ],
)
def test_a_bad_origin_is_named(origin: object, message: str) -> None:
    state = {**LoaderState(seed=1, step=5, batch_size=8, fingerprint="f").to_dict()}
    with pytest.raises(StateError, match=message):
        LoaderState.from_dict({**state, "origin": origin, "version": ORIGIN_VERSION})


def test_a_state_past_the_sample_numbers_cannot_change_batch_size() -> None:
    st = LoaderState(seed=1, step=2**53 - 1, batch_size=4096, fingerprint="f")
    assert st.origin_for(4096) is None  # loads as before with its own batch size
    with pytest.raises(StateError, match=r"counts \d+ samples read, past the int64"):
        st.origin_for(8192)


def test_an_origin_of_nothing_read_is_no_origin() -> None:
    st = LoaderState(seed=1, step=0, batch_size=8, fingerprint="f")
    assert st.origin_for(16) is None  # a change before any step: batch 16 from the start
    d = {**st.to_dict(), "origin": {"step": 0, "sample": 0}, "version": ORIGIN_VERSION}
    assert LoaderState.from_dict(d) == st


def test_a_state_with_an_origin_is_version_3_which_older_headrace_refuses() -> None:
    # A headrace from before origins ignores the key and would read on at step * batch,
    # other samples, silently; it refuses a plan version it does not know. Version 3 is
    # a state with an origin, and only that.
    st = LoaderState(seed=1, step=5, batch_size=16, fingerprint="f", origin=(3, 24))
    d = st.to_dict()
    assert d["version"] == ORIGIN_VERSION == PLAN_VERSION + 1
    assert LoaderState.from_dict(d) == st and LoaderState.from_dict(d).to_dict() == d
    assert LoaderState(seed=1, step=5, batch_size=16, fingerprint="f").to_dict()["version"] == 2
    with pytest.raises(StateError, match=r"plan version 3 and no origin"):
        LoaderState.from_dict({k: v for k, v in d.items() if k != "origin"})
    with pytest.raises(StateError, match=r"plan version 2 and an origin"):
        LoaderState.from_dict({**d, "version": PLAN_VERSION})
