"""headrace under trainers that take a DataLoader: Hugging Face accelerate, Lightning and
the Hugging Face Trainer, each in real 2-process runs (torchrun, gloo, CPU).

Each run checks, on every rank, that the batches the model got are exactly
``Loader(..., rank=r, world_size=2)``'s (``batch_digest``), that resuming from the
framework's own checkpoint in a new process continues with the same batches and ends
with the same parameters, and that the wrappers that would re-split, replay or skip
batches are refused with a ``ConfigError`` on every rank (none hangs).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch", reason="torch is an optional extra (pip install torch)")

from _adapter_data import BATCH, launch, token_source, torchrun
from _frameworks import SAVE_AT, SEED, STEPS, val_source

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


def run(
    script: str,
    root: Path,
    out: Path,
    *extra: object,
    world: int = WORLD,
    start: Callable[..., None] | None = None,
) -> Records:
    """Both phases of ``script`` on ``world`` ranks (``start``ed by torchrun unless
    given); each rank's ``(first, resume)`` record."""
    for mode in ("first", "resume"):
        (start or partial(torchrun, world))(script, root, out, mode, *extra)
    return read_records(out, world)


def read_records(out: Path, world: int) -> Records:
    """Each rank's ``(first, resume)`` record, from OUT/{mode}-{rank}.json."""
    return [
        tuple(json.loads((out / f"{mode}-{r}.json").read_text()) for mode in ("first", "resume"))  # type: ignore[misc]
        for r in range(world)
    ]


@pytest.fixture(scope="module")
def lightning_ddp(root: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Records]:
    """lightning_train.py's ``plain`` and ``own-loop`` runs on 2 ranks, by variant: both
    in the same processes, which start (and import Lightning) once instead of twice."""
    pytest.importorskip("lightning", reason="pip install lightning (in the test extra)")
    return lightning(root, tmp_path_factory.mktemp("lightning"), "plain", "own-loop")


def lightning(root: Path, out: Path, *variants: str, world: int = WORLD) -> dict[str, Records]:
    """Both phases of lightning_train.py's ``variants`` on ``world`` ranks, by variant."""
    for mode in ("first", "resume"):
        torchrun(world, "lightning_train.py", root, out, mode, *variants)
    return {v: read_records(out / v, world) for v in variants}


def check_exact(root: Path, records: Records) -> None:
    for rank, (first, resumed) in enumerate(records):
        want = reference(root, rank, len(records))
        assert first["seen"] == want, rank  # this rank's slice, every step, in order
        assert resumed["seen"] == want[SAVE_AT:], rank  # neither replayed nor skipped
        assert resumed["params"] == first["params"], rank


@pytest.mark.integration
def test_accelerate(root: Path, tmp_path: Path) -> None:
    pytest.importorskip("accelerate", reason="pip install accelerate (in the test extra)")
    records = run("accelerate_train.py", root, tmp_path)
    check_exact(root, records)
    for rank, (first, resumed) in enumerate(records):
        dispatch, shard = first["refused"]["dispatch"], first["refused"]["shard"]
        assert "DataLoaderDispatcher over 2 processes" in dispatch
        assert f"only rank {rank}'s rows" in dispatch and RECIPE in dispatch
        assert "IterableDatasetShard over 2 processes" in shard and RECIPE in shard
        assert "skip_first_batches would read and drop the first 3" in resumed["refused"]["skip"]


@pytest.mark.integration
def test_accelerate_launch(root: Path, tmp_path: Path) -> None:
    # accelerate's own launcher. With --cpu it starts one process (several only through
    # mpirun, not installed here); --multi_gpu starts them through torch's elastic agent,
    # on a machine without a GPU too, and the script's Accelerator(cpu=True) joins gloo.
    pytest.importorskip("accelerate", reason="pip install accelerate (in the test extra)")
    options = ["--multi_gpu", f"--num_processes={WORLD}", "--num_machines=1"]
    options += ["--mixed_precision=no", "--dynamo_backend=no", "--main_process_port=0"]
    # HF_HOME: no accelerate config of this machine's (it would fill in other settings).
    start = partial(launch, ["accelerate.commands.launch", *options], HF_HOME=str(tmp_path))
    check_exact(root, run("accelerate_train.py", root, tmp_path, start=start))


@pytest.mark.integration
def test_lightning(root: Path, lightning_ddp: dict[str, Records]) -> None:
    check_exact(root, lightning_ddp["plain"])
    for rank, (first, resumed) in enumerate(lightning_ddp["plain"]):
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
def test_lightning_with_workers(root: Path, tmp_path: Path) -> None:
    # HeadraceDataLoader(ds, num_workers=2), a chunk a step (the workers take turns):
    # Lightning's checkpoint at step 3 resumes, in a new process, with new workers. One
    # rank (test_lightning has two): 2 ranks took 77 and 55 s, 1 rank 51 and 45 s, when
    # each worker imported Lightning with the script (2c, load 5, 2026-12-03); the
    # workers import no Lightning since (lightning_train.py).
    pytest.importorskip("lightning", reason="pip install lightning (in the test extra)")
    check_exact(root, lightning(root, tmp_path, "workers", world=1)["workers"])


@pytest.mark.integration
def test_lightning_with_a_fit_loop_of_the_users(
    root: Path, lightning_ddp: dict[str, Records]
) -> None:
    # trainer.fit_loop replaced by a subclass of Lightning's: the batch its fetcher holds
    # is counted back (the resumed run skipped step 3), and the stock DataLoader resumed
    # is refused (it was not); both found only by the loop's own type until 2026-12-03.
    check_exact(root, lightning_ddp["own-loop"])
    for _, resumed in lightning_ddp["own-loop"]:
        assert f"step={SAVE_AT}.ckpt at global step {SAVE_AT}" in resumed["refused"]["stock"]


@pytest.mark.integration
def test_lightning_resumed_at_an_epochs_end(root: Path, tmp_path: Path) -> None:
    # An exact pass on a stock DataLoader, resumed from the checkpoint of epoch 0's end:
    # its second epoch is the uninterrupted run's (refused until 2026-12-03).
    pytest.importorskip("lightning", reason="pip install lightning (in the test extra)")
    torchrun(1, "lightning_epochs.py", root, tmp_path)
    got = json.loads((tmp_path / "epochs.json").read_text())
    first, resumed = got["first"], got["resumed"]
    assert isinstance(resumed, list), resumed
    epoch1 = [d for e, d in first if e == 1]
    assert epoch1 == [d for e, d in first if e == 0]  # the pass over again
    assert [d for _, d in resumed] == epoch1 and {e for e, _ in resumed} == {1}


@pytest.mark.integration
def test_hf_trainer(root: Path, tmp_path: Path) -> None:
    pytest.importorskip("transformers", reason="pip install transformers (in the test extra)")
    records = run("hf_trainer_train.py", root, tmp_path)
    check_exact(root, records)
    for first, resumed in records:
        assert "DataLoaderDispatcher over 2 processes" in first["refused"]["stock"]
        assert "ignore_data_skip=True" in resumed["refused"]["skip"]
