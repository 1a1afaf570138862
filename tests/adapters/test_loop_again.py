"""`for epoch in range(3): for batch in loader` over a loader whose run is over, the same
for every consumer (Loader with and without read-ahead, HeadraceDataLoader with 0 and 2
workers): steps=k yields nothing after the first loop and warns each time; epochs=1 (an
exact pass) starts over, the same batches in the same order, without a word. Real files,
real worker processes."""

from __future__ import annotations

import hashlib
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is an optional extra (pip install torch)")

from _adapter_data import token_source  # noqa: E402

from headrace import torch as ht  # noqa: E402
from headrace.pipeline import Loader  # noqa: E402

BATCH = 16
CONSUMERS = ["Loader prefetch=8", "Loader prefetch=0", "HeadraceDataLoader w0", "w2"]


def make(root: Path, who: str, **end: int) -> Any:
    src = token_source(root)
    if who.startswith("Loader"):
        return Loader(src, batch_size=BATCH, prefetch=int(who[-1]), **end)
    workers = 2 if who == "w2" else 0
    return ht.HeadraceDataLoader(ht.TorchDataset(src, batch_size=BATCH, **end), num_workers=workers)


def loop(loader: Iterable[Any]) -> tuple[int, str]:
    """Batches and SHA-256 of their inputs, one loop."""
    h, n = hashlib.sha256(), 0
    for batch in loader:
        h.update(np.asarray(batch["x"]).tobytes())
        n += 1
    return n, h.hexdigest()


@pytest.mark.parametrize("who", CONSUMERS)
def test_a_loop_over_a_finished_run_is_the_same_for_every_consumer(root: Path, who: str) -> None:
    # The exact pass's length, in steps, and its batches: steps=that is the same stream.
    with make(root, who, epochs=1) as ld:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # starting over says nothing: it is meant
            passes = [loop(ld) for _ in range(3)]
        state = ld.state_dict()
    n, digest = passes[0]
    assert n > 2 and passes == [(n, digest)] * 3
    with make(root, who, steps=n) as ld:
        assert loop(ld) == (n, digest)
        for _ in range(2):
            with pytest.warns(RuntimeWarning) as said:
                assert loop(ld) == (0, hashlib.sha256().hexdigest())
            text = str(said[0].message)
            assert f"yields nothing: step {n} is the run's end (steps={n})" in text
            assert "give steps=epochs * steps_per_epoch (or None) and loop once" in text
            assert "(epochs=1 would not do: an exact pass starts over" in text
    # A finished pass, saved and loaded, is the whole pass again (resume unchanged).
    with make(root, who, epochs=1) as ld:
        ld.load_state_dict(state)
        assert loop(ld) == (n, digest)
