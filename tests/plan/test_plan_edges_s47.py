"""Edge cases of the plan found by a review (session 47)."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headrace.errors import ConfigError
from headrace.plan import Permutation, derive_keys


@given(
    n=st.sampled_from([1, 2, 3, 7, 31, 2**10 + 1, 2**16 - 1, 2**40 + 1, 2**62 + 3, 2**63 - 1]),
    seed=st.sampled_from([0, 1, 2**32, 2**64 - 1]),
    data=st.data(),
)
@settings(max_examples=40, deadline=None)
def test_a_numpy_integer_position_permutes_as_the_int(n: int, seed: int, data: Any) -> None:
    # A place computed with NumPy (an np.int64) reached the network as such: NumPy's int64
    # cannot take the 64-bit keys ("OverflowError: Python int too large to convert to C
    # long"), and an np.uint64 took them with overflow warnings (errors under pytest).
    perm = Permutation(n, derive_keys(seed, 7))
    i = data.draw(st.integers(0, n - 1))
    want = perm.one(i)
    assert 0 <= want < n
    for kind in (np.int64, np.uint64, np.intp):
        assert perm.one(kind(i)) == want
    assert int(perm(np.array([i]))[0]) == want
    assert int(perm.inverse(np.array([want]))[0]) == i


@given(
    n=st.sampled_from([1, 2, 3, 5, 127, 2**7 - 1, 2**7 + 1, 2**12 - 1, 2**12 + 1, 4099]),
    seed=st.sampled_from([0, 2**32 - 1, 2**32, 2**63 - 1, 2**64 - 1]),
)
@settings(max_examples=25, deadline=None)
def test_permutations_of_edge_sizes_and_seeds_are_bijections(n: int, seed: int) -> None:
    # (Held already: pinned here for the sizes and seeds at the edges of the network.)
    perm = Permutation(n, derive_keys(seed))
    image = perm(np.arange(n))
    assert sorted(image.tolist()) == list(range(n))
    assert perm.inverse(image).tolist() == list(range(n))
    assert [perm.one(i) for i in range(min(n, 20))] == image[:20].tolist()


def test_places_that_are_no_integers_are_refused_not_truncated() -> None:
    # perm([1.5]) read place 1, and perm(np.arange(4) + 0.5) the places 0..3, silently;
    # perm.one(3.0) was "unsupported operand type(s) for >>: 'float' and 'int'".
    perm = Permutation(100, derive_keys(3))
    for bad in ([1.5], np.arange(4) + 0.5, np.array([True, False]), ["3"]):
        with pytest.raises(TypeError, match=r"permutation indices must be integers \(got "):
            perm(bad)
        with pytest.raises(TypeError, match=r"permutation indices must be integers \(got "):
            perm.inverse(bad)
    for one in (3.0, True, "3", None):
        with pytest.raises(TypeError, match=r"permutation index must be an integer \(got "):
            perm.one(one)  # type: ignore[arg-type]
    # Lists of ints, and nothing at all, are still places.
    assert perm([]).shape == (0,) and perm([1, 2]).tolist() == perm(np.array([1, 2])).tolist()


@pytest.mark.parametrize("bad", [1.5, True, "1", None, -1, 2**64])
def test_counters_that_are_no_integers_in_range_are_refused(bad: Any) -> None:
    # A float was "unsupported operand type(s) for >>", and True keyed as 1 (the Loader
    # refuses such seeds; the plan's own callers, such as MixturePlan.locate, did not).
    with pytest.raises(ValueError, match=r"counters must be integers in \[0, 2\*\*64\) \(got "):
        derive_keys(5, bad)
    assert derive_keys(np.int64(5), np.uint64(2**64 - 1)).tolist() == (
        derive_keys(5, 2**64 - 1).tolist()
    )


def test_an_empty_file_in_a_window_layout_offers_no_start() -> None:
    # A file of 0 tokens offered (0 - 1) // L = -1 starts: alone, np.repeat refused
    # "negative dimensions"; beside other files, each took a sample off the epoch's count
    # (14 of these 17), whose last samples were never read, without a word.
    from headrace.plan import WindowLayout

    for shuffle in (True, False):
        kw: dict[str, Any] = {"context": 4, "window_tokens": 13, "shuffle": shuffle}
        with_empty = WindowLayout(file_tokens=(0, 50, 0, 21, 0), **kw)
        without = WindowLayout(file_tokens=(50, 21), **kw)
        assert with_empty.file_starts.tolist() == [0, 12, 0, 5, 0]
        assert with_empty.samples_per_epoch == without.samples_per_epoch == 17
        samples = np.arange(3 * 17, dtype=np.int64)
        got, want = with_empty.locate(7, samples), without.locate(7, samples)
        assert (
            with_empty.window_file[got.window] == 2 * without.window_file[want.window] + 1
        ).all()
        assert got.start.tolist() == want.start.tolist()
    with pytest.raises(ValueError, match=r"file token counts must be >= 0 \(got -1 for file 1\)"):
        WindowLayout(file_tokens=(50, -1), context=4, window_tokens=13)


class _OwnSource:
    """A user's own source, whose fingerprint holds what NumPy and pathlib give."""

    samples_per_epoch = 40

    def __init__(self, described: dict[str, Any]) -> None:
        self.described = described

    def fingerprint(self) -> dict[str, Any]:
        return self.described

    def read(self, seed: int, samples: Any) -> dict[str, Any]:
        return {"x": np.asarray(samples, dtype=np.int64)[:, None] * 3 + seed}


def test_a_fingerprint_of_numpy_numbers_and_paths_describes_as_their_json(tmp_path: Any) -> None:
    # Loader(...) raised "TypeError: Object of type int64 is not JSON serializable" from
    # inside json (a count as arr.sum(), a size as arr.shape[0] * itemsize, a pathlib path),
    # naming neither the source nor the value.
    from headrace.pipeline import Loader
    from headrace.plan import fingerprint_digest, fingerprint_parts

    path = tmp_path / "rows.bin"
    own = {
        "kind": "mine",
        "rows": np.int64(40),
        "path": path,
        "sizes": np.array([3, 4]),
        "flag": np.bool_(True),
        "files": [{"path": path, "bytes": np.int64(12)}],
    }
    plain = {
        "kind": "mine",
        "rows": 40,
        "path": str(path),
        "sizes": [3, 4],
        "flag": True,
        "files": [{"path": str(path), "bytes": 12}],
    }
    assert fingerprint_digest(own) == fingerprint_digest(plain)
    assert fingerprint_parts(own) == fingerprint_parts(plain)
    with Loader(_OwnSource(own), batch_size=4, seed=1, steps=3) as ld:
        got = [b["x"].tolist() for b in ld]
        state = ld.state_dict()
    with Loader(_OwnSource(plain), batch_size=4, seed=1, steps=3) as ld:
        assert [b["x"].tolist() for b in ld] == got
        ld.load_state_dict(state)  # the same description
    # What has no JSON form is refused by name, with the fix.
    for bad, shown in ((b"abc", "bytes b'abc'"), ({1, 2}, "set {1, 2}")):
        with pytest.raises(ConfigError, match=rf"fingerprint holds {re.escape(shown)}, which "):
            fingerprint_digest({"kind": "mine", "odd": bad})


def test_group_by_window_keeps_windows_past_2_32_apart() -> None:
    # Packed as (epoch << 32) | window: window 2**32 + 5 of epoch 0 was window 5 of
    # epoch 1 (a corpus of 2**32 windows: 16 TiB of uint16 tokens in 4 KiB windows),
    # and both groups were read as that one, without a word.
    from headrace.plan import group_by_window

    epoch = np.array([0, 0, 1, 0], dtype=np.int64)
    window = np.array([2**32 + 5, 5, 5, 2**32 + 5], dtype=np.int64)
    got = [(key, idx.tolist()) for key, idx in group_by_window(epoch, window)]
    assert got == [((0, 2**32 + 5), [0, 3]), ((0, 5), [1]), ((1, 5), [2])]


def test_a_hand_edited_setting_that_is_a_list_is_compared_not_a_type_error() -> None:
    # {was, is_} as a set raised "unhashable type: 'list'" for a shuffle saved as a list.
    from headrace.plan._changes import _hint

    assert _hint("shuffle", ["full"], "window") == ""
    assert "shuffle='full'" in _hint("sources.a.shuffle", True, "window")
    assert "shuffle='window'" in _hint("shuffle", "window", True)
