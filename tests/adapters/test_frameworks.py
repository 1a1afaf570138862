"""headrace under trainers that take a DataLoader: Hugging Face accelerate and the
Hugging Face Trainer (Lightning: test_frameworks_lightning.py), each in real 2-process
runs (torchrun, then accelerate launch, gloo, CPU), both trainers in the same processes.

Each run checks, on every rank, that the batches the model got are exactly
``Loader(..., rank=r, world_size=2)``'s (``batch_digest``), that resuming from the
framework's own checkpoint in a new process continues with the same batches and ends
with the same parameters, and that the wrappers that would re-split, replay or skip
batches are refused with a ``ConfigError`` on every rank (none hangs).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="torch is an optional extra (pip install torch)")

from _adapter_data import launch, torchrun
from _framework_checks import RECIPE, WORLD, Records, check_exact, read_records


@pytest.fixture(scope="module")
def trained(root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """accelerate_train.py's two phases on WORLD ranks, each followed in the same
    processes by hf_trainer_train.py's (into OUT/hf) where transformers is installed: the
    ranks start, importing torch and accelerate, once for both trainers. Their folder.

    The first phase runs under torchrun, the resume under accelerate's own launcher (a
    run of each launcher in each phase cost two more 2-rank runs): both phases are
    checked alike, and the checkpoints move between launchers as a user's may. With
    --cpu accelerate launch starts one process (several only through mpirun, not
    installed here); --multi_gpu starts them through torch's elastic agent, on a machine
    without a GPU too, and the scripts' Accelerator(cpu=True) and
    TrainingArguments(use_cpu=True) join gloo."""
    pytest.importorskip("accelerate", reason="pip install accelerate (in the test extra)")
    out = tmp_path_factory.mktemp("trained")
    also = ["hf"] if importlib.util.find_spec("transformers") else []
    options = ["--multi_gpu", f"--num_processes={WORLD}", "--num_machines=1"]
    options += ["--mixed_precision=no", "--dynamo_backend=no", "--main_process_port=0"]
    torchrun(WORLD, "accelerate_train.py", root, out, "first", *also)
    # HF_HOME: no accelerate config of this machine's (it would fill in other settings).
    launch(
        ["accelerate.commands.launch", *options],
        "accelerate_train.py",
        root,
        out,
        "resume",
        *also,
        HF_HOME=str(out),
    )
    return out


@pytest.mark.integration
def test_accelerate(root: Path, trained: Path) -> None:
    records = read_records(trained, WORLD)
    check_exact(root, records)
    for rank, (first, resumed) in enumerate(records):
        dispatch, shard = first["refused"]["dispatch"], first["refused"]["shard"]
        assert "DataLoaderDispatcher over 2 processes" in dispatch
        assert f"only rank {rank}'s rows" in dispatch and RECIPE in dispatch
        assert "IterableDatasetShard over 2 processes" in shard and RECIPE in shard
        assert "skip_first_batches would read and drop the first 3" in resumed["refused"]["skip"]


@pytest.mark.integration
def test_hf_trainer(root: Path, trained: Path) -> None:
    # Run in `trained`'s processes (the Trainer needs accelerate too): its first phase
    # under torchrun, its resume under accelerate launch.
    pytest.importorskip("transformers", reason="pip install transformers (in the test extra)")
    records: Records = read_records(trained / "hf", WORLD)
    check_exact(root, records)
    for first, resumed in records:
        assert "DataLoaderDispatcher over 2 processes" in first["refused"]["stock"]
        assert "ignore_data_skip=True" in resumed["refused"]["skip"]
