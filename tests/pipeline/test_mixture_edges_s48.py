"""Edges of Mixture: what cannot be mixed is refused when built, with the way out."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from headrace.errors import ConfigError
from headrace.formats import PaddedRows, write_row_file
from headrace.pipeline import Loader, Mixture


def rows(root: Path, name: str, base: int, n: int = 10) -> PaddedRows:
    tok = np.full((n, 5), base, dtype=np.uint16)
    tok[:, 1] = np.arange(n)
    write_row_file(root / f"{name}.npy", tok)
    return PaddedRows(root / f"{name}.npy", context=4)


def test_a_mixture_of_mixtures_is_refused_when_built_with_the_weights_to_give(
    tmp_path: Path,
) -> None:
    # It was built, and its first batch refused with "source 'ab' returns a 'source'
    # array ... leave that column out (TableSource(columns=[...]))", a way out that is
    # none: the inner mixture decodes steps of its own batch, which it is not given.
    inner = Mixture(
        {"a": rows(tmp_path, "a", 1), "b": rows(tmp_path, "b", 2)}, [1, 3], batch_size=4
    )
    c = rows(tmp_path, "c", 3)
    with pytest.raises(ConfigError, match=r"source 'ab' is itself a Mixture; mixtures do not nest"):
        Mixture({"ab": inner, "c": c}, [1, 1], batch_size=4)
    with pytest.raises(ConfigError, match=r"source '0' is itself a Mixture") as err:
        Mixture([inner, c], [2, 1], batch_size=4)
    assert "each weighted by its weight in it times the inner mixture's" in str(err.value)
    # The way out: one mixture of the inner sources, weights multiplied out.
    flat = Mixture(
        {"a": inner.sources[0], "b": inner.sources[1], "c": c}, [2 / 8, 6 / 8, 1], batch_size=4
    )
    with Loader(flat, batch_size=4, seed=1, prefetch=0, steps=50) as ld:
        got = np.concatenate([b["x"][:, 0] for b in ld])
    assert np.bincount(got, minlength=4)[1:].tolist() == [25, 75, 100]


class _Labelled:
    """Values under labels, iterated as values (as a pandas Series is)."""

    def __init__(self, by_label: dict[str, float]) -> None:
        self.by_label = by_label

    def keys(self) -> list[str]:
        return list(self.by_label)

    def __iter__(self) -> Iterator[float]:
        return iter(self.by_label.values())


def test_weights_of_any_iterable_of_numbers_are_taken_in_order(tmp_path: Path) -> None:
    # sizes.values() or a generator were refused as "weights must be a list of numbers"
    # (only a list, tuple or array was one).
    srcs = {"a": rows(tmp_path, "a", 1), "b": rows(tmp_path, "b", 2)}
    want = Mixture(srcs, [1, 3], batch_size=4).fingerprint()
    sizes = {"a": 10, "b": 30}
    assert Mixture(srcs, sizes.values(), batch_size=4).fingerprint() == want
    assert Mixture(srcs, (w for w in [1, 3]), batch_size=4).fingerprint() == want
    sched = Mixture(srcs, [1, 3], batch_size=4, schedule={2: sizes.values()})
    assert sched.plan.schedule == ((2, sched.plan.numerators),)
    # What has keys but is no Mapping (a pandas Series, labelled): by name or in order?
    # A set (sizes.keys() too) has no order. Refused, not guessed.
    for bad in ("13", b"13", 1.0, None, _Labelled({"b": 1, "a": 3}), {1, 3}, sizes.keys()):
        with pytest.raises(ConfigError, match=r"weights must be a list of numbers, one per"):
            Mixture(srcs, bad, batch_size=4)  # type: ignore[arg-type]


def test_what_is_no_source_is_refused_when_built_naming_it(tmp_path: Path) -> None:
    # A path, None or an array among the sources was built, and the Loader over the
    # mixture raised "AttributeError: 'str' object has no attribute 'fingerprint'".
    a = rows(tmp_path, "a", 1)
    path = tmp_path / "a.npy"
    for bad, way in ((str(path), "TokenSource"), (path, "TokenSource"), (None, "")):
        with pytest.raises(
            ConfigError, match=r"Mixture: source 'b' must have read\(seed, sam"
        ) as e:
            Mixture({"a": a, "b": bad}, [1, 1], batch_size=4)  # type: ignore[dict-item]
        assert f"got {type(bad).__name__}" in str(e.value) and way in str(e.value)
