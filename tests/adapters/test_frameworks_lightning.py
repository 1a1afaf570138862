"""headrace under Lightning, in real 2-process runs (torchrun, gloo, CPU); the other
trainers are test_frameworks.py's.

Each run checks, on every rank, that the batches the model got are exactly
``Loader(..., rank=r, world_size=2)``'s (``batch_digest``), that resuming from the
framework's own checkpoint in a new process continues with the same batches and ends
with the same parameters, and that the wrappers that would re-split, replay or skip
batches are refused with a ``ConfigError`` on every rank (none hangs).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="torch is an optional extra (pip install torch)")

from _adapter_data import BATCH, torchrun
from _framework_checks import RECIPE, WORLD, check_exact, read_records, reference
from _frameworks import SAVE_AT, SEED, STEPS, val_source

from headrace.pipeline import Loader
from headrace.testing import batch_digest

VARIANTS = ("plain", "own-loop", "workers", "epochs")
# The first test to ask for lightning_ddp runs both launches (each up to launch()'s 300 s):
# 238 s together at load 20 (2c, 2026-12-07), near pyproject's 300 s a test.
pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def lightning_ddp(root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """lightning_train.py's VARIANTS on 2 ranks, all in the same processes, which start
    (and import Lightning, 9.4 s CPU a process) once for all. ``workers`` and ``epochs``
    ran on 1 rank of their own, in 2 launches more (2 agents, 2 Lightning imports, for
    one forkserver a phase less) until 2026-12-07. Their output folder."""
    pytest.importorskip("lightning", reason="pip install lightning (in the test extra)")
    out = tmp_path_factory.mktemp("lightning")
    for mode in ("first", "resume"):
        torchrun(WORLD, "lightning_train.py", root, out, mode, *VARIANTS)
    return out


@pytest.mark.integration
def test_lightning(root: Path, lightning_ddp: Path) -> None:
    records = read_records(lightning_ddp / "plain", WORLD)
    check_exact(root, records)
    for rank, (first, resumed) in enumerate(records):
        # A stock DataLoader: no sampler injected, each rank's own slice (not resumable).
        assert first["refused"]["stock_seen"] == reference(root, rank)[:SAVE_AT]
        stock = resumed["refused"]["stock"]
        # A stock validation loader inside the resumed fit: not refused, its whole pass.
        with Loader(
            val_source(root), batch_size=BATCH, seed=SEED, epochs=1, rank=rank, world_size=WORLD
        ) as ld:
            val = [batch_digest([b]) for b in ld]
        assert first["val"] == val * (STEPS // 2), rank  # at steps 2, 4, 6
        assert resumed["val"] == val * (STEPS // 2 - SAVE_AT // 2), rank  # at 4, 6
        assert f"step={SAVE_AT}.ckpt at global step {SAVE_AT}" in stock, stock
        assert "start again at step 0" in stock and RECIPE in stock


@pytest.mark.integration
def test_lightning_with_workers(root: Path, lightning_ddp: Path) -> None:
    # HeadraceDataLoader(ds, num_workers=2) on each rank, a chunk a step (the workers take
    # turns): Lightning's checkpoint at step 3 resumes, in a new process, with new
    # workers. (2 ranks took 77 and 55 s, 1 rank 51 and 45 s, when each worker imported
    # Lightning with the script (2c, load 5, 2026-12-03); the workers import no
    # Lightning since (lightning_train.py), and run in test_lightning's processes.)
    check_exact(root, read_records(lightning_ddp / "workers", WORLD))


@pytest.mark.integration
def test_lightning_with_a_fit_loop_of_the_users(root: Path, lightning_ddp: Path) -> None:
    # trainer.fit_loop replaced by a subclass of Lightning's: the batch its fetcher holds
    # is counted back (the resumed run skipped step 3), and the stock DataLoader resumed
    # is refused (it was not); both found only by the loop's own type until 2026-12-03.
    records = read_records(lightning_ddp / "own-loop", WORLD)
    check_exact(root, records)
    for _, resumed in records:
        assert f"step={SAVE_AT}.ckpt at global step {SAVE_AT}" in resumed["refused"]["stock"]


@pytest.mark.integration
@pytest.mark.parametrize("rank", range(WORLD))
def test_lightning_resumed_at_an_epochs_end(lightning_ddp: Path, rank: int) -> None:
    # An exact pass on a stock DataLoader, resumed from the checkpoint of epoch 0's end:
    # its second epoch is the uninterrupted run's (refused until 2026-12-03).
    # lightning_epochs.py's fits, run in lightning_ddp's resume processes (DDP, 2 ranks).
    got = json.loads((lightning_ddp / "epochs" / f"epochs-{rank}.json").read_text())
    first, resumed = got["first"], got["resumed"]
    assert isinstance(resumed, list), resumed
    epoch1 = [d for e, d in first if e == 1]
    assert epoch1 and epoch1 == [d for e, d in first if e == 0]  # the pass over again
    assert [d for _, d in resumed] == epoch1 and {e for e, _ in resumed} == {1}
