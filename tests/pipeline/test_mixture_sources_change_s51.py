"""A long run's mixture changes at a restart: a source dropped, added, or one source's
files changed. The refusal's way on says what the sources get, and following it does
what it says (checked on the tokens: every token of a file is its offset plus a base).

Until 2026-12-07 each of these got the way on of a single source's changed files
("the epoch in progress is shuffled anew"), which for a mixture is wrong twice: a
source dropped from the middle moves the ids of those after it, which key their
shuffles, and every source then goes on where the new weights bring it; while a
source dropped through a weight of 0 (a schedule) loses no sample of the others.
"""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headrace.errors import StateError
from headrace.formats import TokenSource
from headrace.pipeline import Loader, Mixture

L = 16
B = 24
K = 6  # the saved step
W = {"web": 0.5, "code": 0.3, "math": 0.2}
BASE = {"web": 0, "code": 1 << 20, "math": 2 << 20, "books": 3 << 20}


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    out = {}
    for name, n in {"web": 20_000, "code": 9_000, "math": 6_000, "books": 5_000}.items():
        path = tmp_path / name / "part-0.bin"
        path.parent.mkdir()
        (np.arange(n, dtype=np.uint32) + BASE[name]).tofile(path)
        out[name] = path
    return out


def mix(files: dict[str, Path], weights: dict[str, float], **kw: Any) -> Mixture:
    srcs = {n: TokenSource(files[n].parent, context=L, dtype="uint32") for n in weights}
    return Mixture(srcs, weights, batch_size=B, **kw)


def run(m: Mixture, steps: int, state: dict[str, Any] | None = None) -> tuple[list[Any], Any]:
    with Loader(m, batch_size=B, seed=5, steps=steps, prefetch=0) as loader:
        if state is not None:
            loader.load_state_dict(state)
        batches = [{k: v.copy() for k, v in b.items()} for b in loader]
        return batches, loader.state_dict()


def own_at(m: Mixture, step: int) -> dict[str, Any]:
    with Loader(m, batch_size=B, seed=5, prefetch=0) as loader:
        state = loader.state_dict()
    state["step"] = step
    return state


def refusal(m: Mixture, saved: dict[str, Any]) -> str:
    with pytest.raises(StateError) as err:
        run(m, K + 1, saved)
    return str(err.value)


def starts_of(batches: list[Any], names: list[str], name: str) -> collections.Counter[int]:
    """Each sample of source ``name`` as its first token's offset in its file."""
    out: collections.Counter[int] = collections.Counter()
    for b in batches:
        rows = b["x"][b["source"] == names.index(name), 0].astype(np.int64) - BASE[name]
        out.update(rows.tolist())
    return out


def test_a_source_dropped_is_told_the_weight_0_way_and_it_loses_no_sample(
    files: dict[str, Path],
) -> None:
    first, saved = run(mix(files, W), K)
    message = refusal(mix(files, {"web": 0.5, "math": 0.2}), saved)
    assert "source 'code' is gone" in message
    assert "weight 0" in message and f"schedule={{{K}: " in message, message
    assert "'code': 0" in message, message
    assert "shuffled anew" not in message, message
    # Followed: the same sources, 'code' weighted 0 from step K on, is the run that had
    # planned it from the start: the saved steps, then every source on from where it was.
    drop = {"web": 0.5, "code": 0, "math": 0.2}
    later = mix(files, W, schedule={K: drop})
    rest, _ = run(later, 40, own_at(later, K))
    planned, _ = run(mix(files, W, schedule={K: drop}), 40)
    assert not any((b["source"] == 1).any() for b in rest)
    for got, want in zip(first + rest, planned, strict=True):
        for k in want:
            assert np.array_equal(got[k], want[k]), k
    # Its files gone (pulled from the corpus), any token source of its layout stands in
    # its place: weighted 0, it is never read, and the others go on alike.
    files["code"].unlink()
    stand_in = files["code"].parent / "stand-in.bin"
    np.zeros(L + 1, dtype=np.uint32).tofile(stand_in)
    srcs = {n: TokenSource(files[n].parent, context=L, dtype="uint32") for n in ("web", "math")}
    srcs = {
        "web": srcs["web"],
        "code": TokenSource(stand_in, context=L, dtype="uint32"),
        "math": srcs["math"],
    }
    stood = Mixture(srcs, W, batch_size=B, schedule={K: drop})
    again, _ = run(stood, 40, own_at(stood, K))
    for got, want in zip(again, rest, strict=True):
        for k in want:
            assert np.array_equal(got[k], want[k]), k


def test_a_source_added_is_told_to_go_last_with_weight_0_before(files: dict[str, Path]) -> None:
    _, saved = run(mix(files, W), K)
    message = refusal(mix(files, {"books": 0.1, **W}), saved)
    assert "source 'books' is new" in message
    assert "last" in message and "weight 0" in message and f"schedule={{{K}: " in message
    assert "shuffled anew" not in message, message
    # Followed: each saved source goes on within a few samples of where it was, in its
    # own order (its first samples after K are those the saved run would have read).
    later = mix(files, {**W, "books": 0}, schedule={K: {**W, "books": 0.1}})
    rest, _ = run(later, K + 12, own_at(later, K))
    whole, _ = run(mix(files, W), K + 12)
    names = ["web", "code", "math", "books"]
    for name in ("web", "code", "math"):
        got, want = starts_of(rest, names, name), starts_of(whole[K:], names, name)
        assert sum(got.values()) > 20 and sum((got - want).values()) <= 2, name
    assert any((b["source"] == 3).any() for b in rest)


def test_one_sources_files_changed_says_the_others_go_on_exactly(
    files: dict[str, Path],
) -> None:
    whole, _ = run(mix(files, W), K + 8)
    _, saved = run(mix(files, W), K)
    shard = files["math"].parent / "part-1.bin"
    (np.arange(3_000, dtype=np.uint32) + BASE["math"] + 10_000).tofile(shard)
    message = refusal(mix(files, W), saved)
    assert "part-1.bin of source 'math'" in message and "is new" in message
    assert "'math'" in message.split("or, ", 1)[1], message  # the way on names it
    assert "the other sources go on exactly" in message, message
    grown = mix(files, W)
    rest, _ = run(grown, K + 8, own_at(grown, K))
    for got, want in zip(rest, whole[K:], strict=True):
        for s in (0, 1):  # web and code: the same samples at the same positions
            assert np.array_equal(got["x"][got["source"] == s], want["x"][want["source"] == s])


def test_a_source_renamed_is_told_the_exact_way_on(files: dict[str, Path]) -> None:
    whole, _ = run(mix(files, W), K + 8)
    _, saved = run(mix(files, W), K)
    renamed = {"web": 0.5, "stack": 0.3, "math": 0.2}
    srcs = {
        n: TokenSource(files["code" if n == "stack" else n].parent, context=L, dtype="uint32")
        for n in renamed
    }
    m = Mixture(srcs, renamed, batch_size=B)
    message = refusal(m, saved)
    assert "source 'code' is gone" in message and "source 'stack' is new" in message
    assert "renamed" in message and "'fingerprint': own['fingerprint']" in message, message
    own = own_at(m, 0)
    rest, _ = run(m, K + 8, {**saved, "fingerprint": own["fingerprint"], "parts": own["parts"]})
    for got, want in zip(rest, whole[K:], strict=True):
        for k in want:
            assert np.array_equal(got[k], want[k]), k
