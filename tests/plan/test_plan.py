from __future__ import annotations

import dataclasses
import json
import pickle
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headrace.errors import ConfigError, StateError
from headrace.plan import (
    LoaderState,
    MixturePlan,
    Permutation,
    WindowLayout,
    array_state,
    derive_keys,
    fingerprint_parts,
    host_slice,
    step_samples,
)
from headrace.plan import _permute as permute_mod
from headrace.plan._permute import _WALK


@given(n=st.integers(1, 5000), seed=st.integers(0, 2**32))
@settings(max_examples=60, deadline=None)
def test_permutation_is_a_bijection_with_inverse(n: int, seed: int) -> None:
    p = Permutation(n, derive_keys(seed))
    image = p(np.arange(n))
    assert np.array_equal(np.sort(image), np.arange(n))
    assert np.array_equal(p.inverse(image), np.arange(n))
    assert p.one(n - 1) == image[-1]


@pytest.mark.parametrize("n", [1, 5, 1000, 200_000, 10**9])
def test_few_entries_walked_in_python_match_the_vectorised_network(n: int) -> None:
    # Up to _WALK entries (and a vectorised pass's last few out-of-range ones) go through
    # the network on Python ints: the same values as NumPy's rounds, forward and back.
    p = Permutation(n, derive_keys(n, 3))
    idx = np.random.default_rng(n).integers(0, n, 4000)
    image = p(idx)  # vectorised: its leftovers walked in Python
    rounds = p._rounds(idx.astype(np.uint64), False)  # and without any Python walk
    while (out := rounds >= n).any():
        rounds[out] = p._rounds(rounds[out], False)
    np.testing.assert_array_equal(image, rounds.astype(np.int64))
    for k in (1, 2, _WALK, _WALK + 1, 40):
        np.testing.assert_array_equal(p(idx[:k]), image[:k])
        np.testing.assert_array_equal(p.inverse(image[:k]), idx[:k])
        np.testing.assert_array_equal(p(idx[:k].reshape(-1, 1)), image[:k].reshape(-1, 1))
    np.testing.assert_array_equal(p.inverse(image), idx)


def test_a_permutation_read_enough_keeps_a_table_of_the_same_images() -> None:
    # Rent or buy: evaluated through the network until that cost what the table would.
    n = 50_000
    p, network = Permutation(n, derive_keys(7)), Permutation(n, derive_keys(7))
    rng = np.random.default_rng(0)
    calls = []
    for call in range(1, 40):
        idx = rng.integers(0, n, 1024)
        np.testing.assert_array_equal(p(idx), network._network(idx, False))
        if p._table is not None:
            calls.append(call)
    assert calls[0] == -(-n // (1500 + 1024))  # each call costs its places and ~1,500 more
    table = p._table
    assert not table.flags.writeable
    np.testing.assert_array_equal(table, network._network(np.arange(n), False))
    idx = rng.integers(0, n, (3, 7))
    np.testing.assert_array_equal(p(idx), network._network(idx, False))
    np.testing.assert_array_equal(p.inverse(p(idx)), idx)  # (the inverse: the network)
    with pytest.raises(IndexError):
        p(np.array([n]))
    # A host of 4,096 reads its share of an epoch, a few places a call: no table.
    host = Permutation(1 << 20, derive_keys(8))
    for start in range(0, 1 << 20, 4096 * 8):
        host(np.arange(start, start + 8))
    assert host._table is None
    # Past TABLE_MAX places, never.
    big = Permutation(permute_mod.TABLE_MAX + 1, derive_keys(9))
    for _ in range(3):
        big(np.arange(permute_mod.TABLE_MAX + 1))
    assert big._table is None


def test_tables_past_their_budget_are_dropped_oldest_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(permute_mod, "TABLE_BYTES", 3 * 8 * 1000)  # three of 1,000 places
    perms = [Permutation(1000, derive_keys(k)) for k in range(5)]
    images = [p(np.arange(1000)) for p in perms]  # each makes its table at once
    assert [p._table is not None for p in perms] == [False, False, True, True, True]
    for p, image in zip(perms, images, strict=True):
        np.testing.assert_array_equal(p(np.arange(1000)), image)  # remade or not: the same
    assert sum(p._table is not None for p in perms) == 3


def test_permutation_depends_on_keys_and_rejects_out_of_range() -> None:
    a = Permutation(1000, derive_keys(1))(np.arange(1000))
    b = Permutation(1000, derive_keys(2))(np.arange(1000))
    assert not np.array_equal(a, b)
    with pytest.raises(IndexError):
        Permutation(10, derive_keys(1))(np.array([10]))
    with pytest.raises(IndexError, match=r"permutation index 10 out of range\(0, 10\)"):
        Permutation(10, derive_keys(1)).one(10)
    with pytest.raises(ValueError, match=r"a permutation needs n >= 1 \(got n=0\)"):
        Permutation(0, derive_keys(1))


def test_golden_permutation_is_pinned() -> None:
    # A change here changes every shuffled run ever recorded: bump PLAN_VERSION.
    p = Permutation(10**9, derive_keys(1234, 5))
    assert p(np.arange(4)).tolist() == GOLDEN


GOLDEN = [826787479, 144479006, 914941242, 370192172]


@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize("files", [(100,), (100, 37, 250), (1000, 1000, 6)])
def test_every_start_once_per_epoch(files: tuple[int, ...], shuffle: bool) -> None:
    L = 5
    lay = WindowLayout(file_tokens=files, context=L, window_tokens=23, shuffle=shuffle)
    T = lay.samples_per_epoch
    assert T == sum((n - 1) // L for n in files)
    want = sorted((f, i * L) for f, n in enumerate(files) for i in range((n - 1) // L))
    for e in range(3):
        plan = lay.locate(7, np.arange(e * T, (e + 1) * T))
        got = sorted(
            (int(lay.window_file[w]), int(lay.window_base[w] + s))
            for w, s in zip(plan.window, plan.start, strict=True)
        )
        assert got == want
        # Windows are visited contiguously: each appears in one run.
        runs = [w for i, w in enumerate(plan.window.tolist()) if i == 0 or plan.window[i - 1] != w]
        assert len(runs) == len(set(runs))
        # Any split of the samples gives the same answer (closed form, no replay).
        parts = [
            lay.locate(7, np.arange(i, min(i + 4, (e + 1) * T)))
            for i in range(e * T, (e + 1) * T, 4)
        ]
        assert np.array_equal(np.concatenate([p.start for p in parts]), plan.start)
        assert np.array_equal(np.concatenate([p.window for p in parts]), plan.window)
    # window_of is locate's window alone, in any order and across epochs.
    mixed = np.random.default_rng(1).permutation(3 * T)
    np.testing.assert_array_equal(lay.window_of(7, mixed), lay.locate(7, mixed).window)


def test_epochs_reshuffle_and_unshuffled_is_sequential() -> None:
    lay = WindowLayout(file_tokens=(10_000,), context=8, window_tokens=257)
    T = lay.samples_per_epoch
    a, b = lay.locate(3, np.arange(T)), lay.locate(3, np.arange(T, 2 * T))
    assert not np.array_equal(a.window * 10**6 + a.start, b.window * 10**6 + b.start)
    seq = WindowLayout(file_tokens=(10_000,), context=8, window_tokens=257, shuffle=False)
    p = seq.locate(3, np.arange(2 * T))
    absolute = seq.window_base[p.window] + p.start
    assert absolute.tolist() == [8 * (i % T) for i in range(2 * T)]


def test_far_step_costs_what_step_one_costs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Planning is closed-form: sample 10**9 runs as many network rounds as sample 32."""
    calls = {"n": 0}
    real = Permutation._rounds

    def counting(self: Permutation, x: np.ndarray, inverse: bool) -> np.ndarray:
        calls["n"] += 1
        return real(self, x, inverse)

    monkeypatch.setattr(Permutation, "_rounds", counting)
    lay = WindowLayout(file_tokens=(10**7, 3 * 10**6 + 7), context=64, window_tokens=1 << 16)
    counts = []
    for first in (32, 10**9):
        lay = WindowLayout(file_tokens=lay.file_tokens, context=64, window_tokens=1 << 16)
        calls["n"] = 0
        lay.locate(11, np.arange(first, first + 32))
        counts.append(calls["n"])
    assert counts[1] <= counts[0] + 8  # cycle-walking varies by a few rounds, not by distance


@pytest.mark.parametrize("world", [1, 2, 4, 8])
def test_host_slices_union_to_the_global_batch(world: int) -> None:
    parts = [step_samples(range(3, 5), 32, *host_slice(32, r, world)) for r in range(world)]
    per_step = [np.concatenate([p.reshape(2, -1)[i] for p in parts]) for i in range(2)]
    assert np.array_equal(np.concatenate(per_step), step_samples(range(3, 5), 32, 0, 32))


def test_host_slice_errors() -> None:
    with pytest.raises(ValueError, match="evenly"):
        host_slice(10, 0, 4)
    with pytest.raises(ValueError, match="cannot give each"):
        host_slice(2, 0, 4)
    with pytest.raises(ValueError, match="rank"):
        host_slice(8, 4, 4)
    with pytest.raises(ValueError, match=r"world_size must be >= 1 \(got 0\)"):
        host_slice(8, 0, 0)


def test_state_round_trip_and_refusals() -> None:
    st_ = LoaderState(seed=1, step=5, batch_size=8, fingerprint="abc")
    assert LoaderState.from_dict(st_.to_dict()) == st_
    with pytest.raises(StateError, match="different data"):
        st_.check(fingerprint="xyz", batch_size=8)
    # Another global batch size resumes at the first sample not read ...
    st_.check(fingerprint="abc", batch_size=16)
    assert (st_.consumed, st_.origin_for(16), st_.origin_for(8)) == (40, (5, 40), None)
    # ... but not for a mixture or an exact pass, which plan by step.
    with pytest.raises(StateError, match=r"global batch size 8, this loader has 16.*Mixture"):
        st_.check(fingerprint="abc", batch_size=16, mixture=True)
    with pytest.raises(StateError, match=r"16; this loader cannot.*exact pass \(epochs=2\)"):
        dataclasses.replace(st_, epochs=2).check(fingerprint="abc", batch_size=16, epochs=2)
    with pytest.raises(StateError, match=r"training run's \(saved by a loader without epochs="):
        st_.check(fingerprint="abc", batch_size=8, epochs=2)  # a pass resumes its own states
    with pytest.raises(StateError, match="plan version"):
        LoaderState.from_dict({**st_.to_dict(), "version": 99})
    # Version 1 planned seeds below 2**32 as version 2 does: those states load.
    v1 = LoaderState.from_dict({**st_.to_dict(), "version": 1})
    assert v1 == dataclasses.replace(st_, version=1)
    v1.check(fingerprint="abc", batch_size=8)
    with pytest.raises(StateError, match=r"plan version 1 and its sources are a mixture"):
        v1.check(fingerprint="abc", batch_size=8, mixture=True)
    st_.check(fingerprint="abc", batch_size=8, mixture=True)
    with pytest.raises(StateError, match=r"plan version 1 and seed 4294967301: version 1"):
        LoaderState.from_dict({**st_.to_dict(), "seed": 5 + 2**32, "version": 1})
    with pytest.raises(StateError, match=r"out of range: seed -1"):  # not blamed on v1
        LoaderState.from_dict({**st_.to_dict(), "seed": -1, "version": 1})


def test_seeds_2_32_apart_do_not_share_keys() -> None:
    # SeedSequence pads short entropy with zero words: (5 + 2**32, 0) and (5, 1) were one
    # key, so a seed 2**32 above another replayed its next epoch.
    assert not np.array_equal(derive_keys(5 + 2**32, 0), derive_keys(5, 1))
    assert not np.array_equal(derive_keys(5 + 2**32, 7), derive_keys(5, 1 + 7 * 2**32))
    keys = {derive_keys(s, e).tobytes() for s in (5, 5 + 2**32, 5 + 2**33) for e in range(3)}
    assert len(keys) == 9
    assert derive_keys(1234, 5).tolist() == derive_keys(1234, 5).tolist()
    with pytest.raises(ValueError, match=r"\[0, 2\*\*64\)"):
        derive_keys(-1)
    with pytest.raises(StateError, match="not a headrace loader state"):
        LoaderState.from_dict({"seed": 1})


def test_a_refused_state_names_the_parts_that_differ() -> None:
    def described(chat_rows: int) -> dict[str, object]:
        return {
            "kind": "mixture",
            "weights": [3, 1],
            "sources": {"code": {"rows": 10}, "chat": {"rows": chat_rows}},
        }

    saved = LoaderState(
        seed=1, step=5, batch_size=8, fingerprint="a", parts=fingerprint_parts(described(4))
    )
    assert LoaderState.from_dict(saved.to_dict()) == saved
    assert set(saved.parts or ()) == {
        *("kind", "weights", "sources.code", "sources.chat"),
        "settings:named",  # the values, named: kind, sources.code.rows, sources.chat.rows
    }
    with pytest.raises(StateError, match=r"what differs: sources\.chat\)") as info:
        saved.check(fingerprint="b", batch_size=8, parts=fingerprint_parts(described(5)))
    assert "sources.chat.rows: 4 when the state was saved, 5 now" in str(info.value)
    with pytest.raises(StateError, match="expected a dict of str to str"):
        LoaderState.from_dict({**saved.to_dict(), "parts": ["kind"]})


def test_partial_window_cache_is_keyed_by_seed() -> None:
    # Files with remainders make partial windows, whose epoch positions depend on
    # the seed: a layout read under one seed must not reuse them for another.
    lay = {"file_tokens": (1000, 537, 2049, 333), "context": 8, "window_tokens": 129}
    used, fresh = WindowLayout(**lay), WindowLayout(**lay)  # type: ignore[arg-type]
    samples = np.arange(used.samples_per_epoch, dtype=np.int64)
    used.locate(1, samples)
    got, want = used.locate(2, samples), fresh.locate(2, samples)
    assert np.array_equal(got.window, want.window)
    assert np.array_equal(got.start, want.start)


def test_sample_numbers_past_int64_are_refused_not_wrapped() -> None:
    # 2**40 * 2**24 == 2**64 wraps to 0 in int64: step 2**40 would read step 0's samples.
    with pytest.raises(ConfigError, match="largest step this batch size allows is"):
        step_samples(np.array([2**40]), 2**24, 2**24 - 2, 2**24)
    with pytest.raises(ConfigError, match="out of range"):
        step_samples(np.array([2**43]), 2**20, 0, 1)
    with pytest.raises(ConfigError, match=">= 0"):
        step_samples(np.array([-1]), 8, 0, 8)
    last = (2**63 - 1) // 2**20 - 1
    assert int(step_samples(np.array([last]), 2**20, 0, 2**20)[-1]) == (last + 1) * 2**20 - 1
    assert step_samples(np.zeros(0, dtype=np.int64), 8, 0, 8).size == 0
    # A mixture plans every step whose samples int64 holds (it stopped at 2**46 samples).
    assert MixturePlan([1.0, 2.0], 4).locate(0, np.array([2**46]))[1].tolist() != [0]
    with pytest.raises(ConfigError, match=r"2\*\*63 - 1"):
        MixturePlan([1.0, 2.0], 4).locate(0, np.array([2**63 - 1]))


@pytest.mark.parametrize("field", [{"seed": -1}, {"seed": 2**63}, {"step": -3}, {"batch_size": 0}])
def test_state_out_of_range_is_refused(field: dict[str, int]) -> None:
    d = {**LoaderState(seed=2**63 - 1, step=0, batch_size=8, fingerprint="f").to_dict(), **field}
    with pytest.raises(StateError, match="out of range"):
        LoaderState.from_dict(d)


@pytest.mark.parametrize("version", ["2", 2.5, 1.9, True, None])
def test_a_state_version_that_is_not_an_integer_is_refused(version: object) -> None:
    # A version of 1.9 was read as 1, and "2" as 2, where a step of "3" is refused.
    d = {**LoaderState(seed=1, step=0, batch_size=8, fingerprint="f").to_dict(), "version": version}
    with pytest.raises(
        StateError, match=rf"loader state has version {version!r}; expected an integer"
    ):
        LoaderState.from_dict(d)


def test_a_state_is_tiny_and_survives_json_and_pickle() -> None:
    parts = {"kind": "983b1ab2e843", "files": "b32260816469", "context": "a5d837a73392"}
    st_ = LoaderState(seed=2**62 + 3, step=2**53 - 1, batch_size=4096, fingerprint="f" * 32)
    st_ = dataclasses.replace(st_, parts=parts)
    text = json.dumps(st_.to_dict())
    assert len(text) < 400
    assert LoaderState.from_dict(json.loads(text)) == st_
    assert LoaderState.from_dict(pickle.loads(pickle.dumps(st_.to_dict()))) == st_
    # Keys a later headrace may add are ignored, not refused.
    assert LoaderState.from_dict({**st_.to_dict(), "sampler": {"x": 1}}) == st_


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"seed": None}, r"has seed None; expected an integer"),
        ({"step": "3"}, r"has step '3'; expected an integer"),
        ({"batch_size": 8.0}, r"has batch_size 8.0; expected an integer"),
        ({"fingerprint": 5}, r"has fingerprint 5; expected a string"),
        ({"fingerprint": None}, r"has fingerprint None; expected a string"),
        ({"parts": ["a"]}, r"has parts \['a'\]; expected a dict of str to str"),
        ({"parts": {"kind": 5}}, r"has parts\['kind'\] 5; expected a string"),
        # array_state's form, but not text: bytes that are not ASCII, or another dtype
        ({"fingerprint": np.array([0xFF, 0x41], np.uint8)}, r"(?s)fingerprint array.*uint8 array"),
        ({"fingerprint": np.array([65, 66], np.int32)}, r"(?s)fingerprint array.*a string"),
        ({"fingerprint": np.zeros((2, 2), np.uint8)}, r"(?s)fingerprint array.*expected a string"),
    ],
)
def test_a_state_field_of_the_wrong_type_is_named(change: dict[str, Any], message: str) -> None:
    st_ = LoaderState(seed=1, step=5, batch_size=8, fingerprint="abc").to_dict()
    with pytest.raises(StateError, match=message):
        LoaderState.from_dict({**st_, **change})


def test_array_state_keeps_no_strings_and_loads_as_it_is() -> None:
    parts = {"kind": "983b1ab2e843", "files": "b32260816469"}
    st_ = LoaderState(seed=2**62 + 3, step=7, batch_size=8, fingerprint="ab" * 16, parts=parts)
    arrays = array_state(st_.to_dict())
    leaves = [*arrays.values(), *arrays["parts"].values()]
    assert not any(isinstance(v, str) for v in leaves)
    assert arrays["fingerprint"].dtype == np.uint8 and arrays["fingerprint"].shape == (32,)
    assert LoaderState.from_dict(arrays) == st_
    # as an array checkpointer restores it: ints as 0-d arrays, text as (read-only) arrays
    restored = {k: np.asarray(v) for k, v in arrays.items() if k != "parts"}
    restored["fingerprint"].flags.writeable = False
    assert LoaderState.from_dict({**restored, "parts": arrays["parts"]}) == st_
    # a state without parts (saved before they existed) has no None leaf in its arrays
    old = dataclasses.replace(st_, parts=None)
    assert "parts" not in array_state(old.to_dict())
    assert LoaderState.from_dict(array_state(old.to_dict())) == old
    with pytest.raises(StateError, match="not a headrace loader state"):
        array_state({"seed": 1})


def test_a_state_missing_keys_names_them() -> None:
    st_ = LoaderState(seed=1, step=5, batch_size=8, fingerprint="abc").to_dict()
    del st_["step"], st_["fingerprint"]
    with pytest.raises(StateError, match=r"it has no 'step', 'fingerprint' \(keys: \["):
        LoaderState.from_dict(st_)
    with pytest.raises(StateError, match=r"a str .*json\.loads it"):
        LoaderState.from_dict(json.dumps(st_))  # type: ignore[arg-type]
    with pytest.raises(StateError, match=r"a NoneType"):
        LoaderState.from_dict(None)  # type: ignore[arg-type]


def _cumulative_by_node(numerators: tuple[int, ...], n: np.ndarray) -> np.ndarray:
    """``C_s(n)`` a tree node at a time, as the module's docstring states it."""
    prefix = [0, *np.cumsum(numerators).tolist()]
    out = np.zeros((*n.shape, len(numerators)), dtype=np.int64)

    def split(lo: int, hi: int, here: np.ndarray) -> None:
        if hi - lo == 1:
            out[..., lo] = here
            return
        mid = (lo + hi) // 2
        wl, w = prefix[mid] - prefix[lo], prefix[hi] - prefix[lo]
        q, r = np.divmod(here, w)
        left = q * wl + (2 * r * wl + w) // (2 * w)
        split(lo, mid, left)
        split(mid, hi, here - left)

    split(0, len(numerators), n)
    return out


@pytest.mark.parametrize("sources", [1, 2, 3, 5, 6, 7, 13, 100, 257])
def test_mixture_cumulative_a_level_at_a_time_is_the_tree_node_by_node(sources: int) -> None:
    # cumulative() splits every node of a tree level at once (a Python loop over the
    # S - 1 nodes cost 11 ms a call at 1,000 sources): the counts must be the tree's.
    rng = np.random.default_rng(sources)
    plan = MixturePlan(rng.random(sources) + 0.05, 8)
    n = np.concatenate([np.arange(300), rng.integers(0, 2**62, 200), [2**63 - 1]])
    n = n.astype(np.int64).reshape(-1, 1)[:, [0, 0]]  # 2-D, as locate's rows
    got = plan.cumulative(n)
    assert got.shape == (*n.shape, sources)
    assert np.array_equal(got, _cumulative_by_node(plan.numerators, n))
    assert plan.cumulative(np.int64(77)).shape == (sources,)
    assert plan.cumulative(np.zeros(0, dtype=np.int64)).shape == (0, sources)


def test_a_state_through_msgpack_loads_and_raw_bytes_keys_are_named() -> None:
    msgpack = pytest.importorskip("msgpack")  # orbax's own dependency
    state = LoaderState(seed=2**62 + 5, step=7, batch_size=8, fingerprint="a" * 32).to_dict()
    assert LoaderState.from_dict(msgpack.unpackb(msgpack.packb(state))).to_dict() == state
    # msgpack before 1.0 (and raw=True) gives bytes keys: it said only "it has no 'seed'".
    with pytest.raises(StateError) as exc:
        LoaderState.from_dict(msgpack.unpackb(msgpack.packb(state), raw=True))
    assert str(exc.value).endswith(
        "; its keys are bytes (b'seed'), as msgpack.unpackb(raw=True) gives them: unpack "
        "with raw=False (msgpack's default since 1.0)"
    )


def test_a_whole_checkpoint_given_as_the_state_names_where_the_state_lies() -> None:
    # {"model": ..., "data": loader.state_dict()} passed whole said only what keys it lacks.
    state = LoaderState(seed=3, step=7, batch_size=8, fingerprint="a" * 32).to_dict()
    for ckpt, where in (
        ({"model": {"w": [1.0]}, "data": state}, "['data']"),
        ({"trainer": {"loops": {"loader": state}}, "step": 7}, "['trainer']['loops']['loader']"),
    ):
        with pytest.raises(StateError) as exc:
            LoaderState.from_dict(ckpt)
        assert str(exc.value).endswith(
            f"; a loader state lies under {where} (a whole checkpoint?): pass that one"
        )
    with pytest.raises(StateError) as exc:  # nothing inside: no hint
        LoaderState.from_dict({"model": {"w": [1.0]}})
    assert str(exc.value).endswith("(keys: ['model'])")
