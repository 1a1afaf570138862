"""Stall warnings (session 52): a slow ``Mapped`` source's function is named as a slow
loader transform is (the warning said "the source may be decoding"), also in a mixture,
whose sources are read on the pool's threads."""

from __future__ import annotations

import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray

from headrace.formats import TokenSource
from headrace.pipeline import Loader, Mapped, Mixture, Samples, _transform

Arrays = dict[str, NDArray[Any]]


@pytest.fixture(autouse=True)
def checked_afresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's functions checked for draws from their first call."""
    monkeypatch.setattr(_transform, "_CHECKED", {})


@pytest.fixture
def tokens(tmp_path: Path) -> Path:
    path = tmp_path / "t.bin"
    np.random.default_rng(0).integers(0, 50_000, 1 << 14, dtype=np.uint16).tofile(path)
    return path


class Relabel:
    """A per-source function as a user writes one: a method, named by its qualname."""

    def slow(self, arrays: Arrays, samples: Samples) -> Arrays:
        time.sleep(0.3)  # a heavy Python relabelling of each row
        return arrays


def _said(loader: Loader) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with loader:
            for _ in loader:
                pass
    return [str(w.message) for w in caught if "no batch for" in str(w.message)]


@pytest.mark.parametrize("prefetch", [0, 2])
def test_a_stall_in_a_mapped_sources_function_names_it_and_what_to_do(
    tokens: Path, prefetch: int
) -> None:
    """The time was the function's, and the warning said "no read ... in flight (the
    source may be decoding ...)", naming no function."""
    src = Mapped(TokenSource(tokens, dtype="uint16", context=16), Relabel().slow)
    loader = Loader(src, batch_size=4, steps=2, chunk_steps=1, prefetch=prefetch, stall_warn_s=0.05)
    said = _said(loader)
    assert said
    named = [s for s in said if "Mapped fn Relabel.slow" in s]
    assert named, said
    assert "num_workers" in named[0] and "cheaper" in named[0]
    assert "the source may be decoding" not in named[0]
    assert "step" in named[0].split("Mapped fn Relabel.slow", 1)[1]


def test_a_stall_in_a_mixtures_mapped_source_names_its_function(tokens: Path) -> None:
    """A mixture reads its sources on the pool's threads, not the loader's."""
    plain = TokenSource(tokens, dtype="uint16", context=16)
    slow = Mapped(TokenSource(tokens, dtype="uint16", context=16), Relabel().slow)
    mix = Mixture({"plain": plain, "slow": slow}, [0.5, 0.5], batch_size=8)
    said = _said(Loader(mix, batch_size=8, steps=2, chunk_steps=1, prefetch=0, stall_warn_s=0.05))
    assert any("Mapped fn Relabel.slow" in s for s in said), said
