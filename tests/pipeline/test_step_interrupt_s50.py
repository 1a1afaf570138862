"""A Ctrl-C that lands between the loader's step update and the hand-over of that
step's batch: the batch was never handed over, so the loader's step must not count it.

Python runs a signal handler at a call, and the step was set inside ``with
self._lock``, whose ``__exit__`` is one: the interrupt raised there left ``loader.step``
one past a batch nobody received, and a notebook that caught it and iterated again
skipped that batch (its state saved then too). The lock here is a fault injection: it
raises ``KeyboardInterrupt`` as it is released right after the step moved to ``at``,
as a signal arriving at that call does.
"""

from __future__ import annotations

import threading
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np
import pytest

from headrace.formats import TokenSource
from headrace.pipeline import Loader
from headrace.testing import batch_digest


class _InterruptedAt:
    """An RLock whose release raises KeyboardInterrupt once, the first time ``loader.step``
    reads ``at`` there (the release that follows the step's update)."""

    def __init__(self, loader: Loader, at: int) -> None:
        self._lock = threading.RLock()
        self._loader = loader
        self._at = at
        self.fired = False

    def __enter__(self) -> bool:
        return self._lock.__enter__()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._lock.__exit__(kind, exc, tb)
        if not self.fired and kind is None and self._loader.step == self._at:
            self.fired = True
            raise KeyboardInterrupt

    def __getattr__(self, name: str) -> Any:
        return getattr(self._lock, name)


@pytest.fixture
def tokens(tmp_path: Path) -> Path:
    path = tmp_path / "t.bin"
    np.random.default_rng(0).integers(0, 50_000, 200_000, dtype=np.uint16).tofile(path)
    return path


@pytest.mark.parametrize("prefetch", [0, 8])
def test_an_interrupt_after_the_step_moved_loses_no_batch(tokens: Path, prefetch: int) -> None:
    def loader() -> Loader:
        src = TokenSource(tokens, dtype="uint16", context=64)
        return Loader(src, batch_size=4, seed=3, steps=12, prefetch=prefetch)

    with loader() as ld:
        want = [batch_digest([b]) for b in ld]
    with loader() as ld:
        fault = _InterruptedAt(ld, at=5)  # as step 4's batch is about to be handed over
        ld._lock = fault  # type: ignore[assignment]
        got = []
        with pytest.raises(KeyboardInterrupt):
            for b in ld:
                got.append(batch_digest([b]))
        assert fault.fired
        assert got == want[:4]
        assert ld.step == 4  # step 4's batch was not handed over
        assert ld.state_dict()["step"] == 4
        got += [batch_digest([b]) for b in ld]  # the notebook's next cell
    assert got == want
