"""What the framework tests (test_frameworks.py, test_frameworks_lightning.py) check on
each rank's record: the batches of ``Loader(..., rank=r, world_size=WORLD)``, in order,
and the same final parameters after a resume. Two modules, so that ``--dist loadfile``
runs them on two workers: together they took 3 to 4 minutes on one (2c, 2026-12-03)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from _adapter_data import BATCH, token_source, torchrun
from _frameworks import SAVE_AT, SEED, STEPS

from headrace.pipeline import Loader
from headrace.testing import batch_digest

WORLD = 2
RECIPE = "docs/frameworks.md#trainers-accelerate-lightning-hugging-face-trainer"


def reference(root: Path, rank: int, world: int = WORLD) -> list[str]:
    with Loader(
        token_source(root), batch_size=BATCH, seed=SEED, steps=STEPS, rank=rank, world_size=world
    ) as ld:
        return [batch_digest([b]) for b in ld]


Records = list[tuple[dict[str, Any], dict[str, Any]]]


def run(script: str, root: Path, out: Path, *extra: object, world: int = WORLD) -> Records:
    """Both phases of ``script`` on ``world`` ranks, by torchrun; each rank's
    ``(first, resume)`` record."""
    for mode in ("first", "resume"):
        torchrun(world, script, root, out, mode, *extra)
    return read_records(out, world)


def read_records(out: Path, world: int) -> Records:
    """Each rank's ``(first, resume)`` record, from OUT/{mode}-{rank}.json."""
    return [
        tuple(json.loads((out / f"{mode}-{r}.json").read_text()) for mode in ("first", "resume"))  # type: ignore[misc]
        for r in range(world)
    ]


def check_exact(root: Path, records: Records) -> None:
    for rank, (first, resumed) in enumerate(records):
        want = reference(root, rank, len(records))
        assert first["seen"] == want, rank  # this rank's slice, every step, in order
        assert resumed["seen"] == want[SAVE_AT:], rank  # neither replayed nor skipped
        assert resumed["params"] == first["params"], rank
