"""What the once battery's tests share (tests/pipeline/test_once_battery*.py): its cases,
a row's identity, and a run of several hosts' loaders joined into the global stream."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from _once_data import SOURCES, row_digests
from headrace.pipeline import Loader

CASES = [(kind, shuffle) for kind, (_, shuffles, _) in SOURCES.items() for shuffle in shuffles]
#: Each kind under its first shuffle (the checks whose failures would not depend on it).
KINDS = [(kind, shuffles[0]) for kind, (_, shuffles, _) in SOURCES.items()]
#: (global batch, world sizes it splits over): one per case, in turn, so each kind meets
#: batches that do not divide its size, and 1 to 5 hosts.
SPLITS = [(6, (1, 2, 3)), (10, (1, 2, 5)), (12, (1, 3, 4))]


def maker(root: Path, kind: str, shuffle: Any) -> Callable[[], Any]:
    if kind == "array_record" and not (root / "ar").exists():
        pytest.skip("pip install array-record (the test extra has it)")
    make = SOURCES[kind][0]
    return lambda: make(root, shuffle)


def identities(batch: dict[str, Any]) -> list[str]:
    # A Mapped source's ``r`` is drawn from each sample's generator: it differs from one
    # epoch to the next by design, so it is not part of the row's identity.
    return row_digests({k: v for k, v in batch.items() if k != "r"})


def epoch_rows(root: Path, kind: str) -> Counter[str]:
    """The rows of one unshuffled epoch (each one distinct: the data is built so)."""
    make, _, unshuffled = SOURCES[kind]
    src = make(root, unshuffled)
    n = src.samples_per_epoch
    want = Counter(identities(src.read(0, np.arange(n))))
    getattr(src, "close", lambda: None)()
    assert len(want) == n, f"{kind}: the battery's data has equal rows"
    return want


def run(
    make: Callable[[], Any],
    batch: int,
    world: int,
    seed: int,
    steps: int | None,
    state: dict[str, Any] | None = None,
    **kw: Any,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """``steps`` global steps (``None``: an exact pass to its end) read by ``world`` hosts
    (each its own loader, as on its own machine) from ``state``: each step's row digests
    in global order (with ``valid``, ``sample``, ``source`` where given), and the state
    after (every host's the same)."""
    per_host, states = [], []
    for rank in range(world):
        with Loader(
            make(), batch_size=batch, seed=seed, rank=rank, world_size=world, chunk_steps=3, **kw
        ) as ld:
            if state is not None:
                ld.load_state_dict(state)
            it = iter(ld)
            per_host.append(list(it) if steps is None else [next(it) for _ in range(steps)])
            states.append(ld.state_dict())
    assert all(s == states[0] for s in states)
    out = []
    for parts in zip(*per_host, strict=True):
        step: dict[str, Any] = {"rows": [d for p in parts for d in identities(p)]}
        for k in ("valid", "sample", "source"):
            if k in parts[0]:
                step[k] = np.concatenate([p[k] for p in parts])
        out.append(step)
    return out, states[0]


def flat(steps: list[dict[str, Any]]) -> list[str]:
    return [d for s in steps for d in s["rows"]]
