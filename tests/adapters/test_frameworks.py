"""headrace under trainers that take a DataLoader: Hugging Face accelerate and the
Hugging Face Trainer (Lightning: test_frameworks_lightning.py), each in real 2-process
runs (torchrun, gloo, CPU).

Each run checks, on every rank, that the batches the model got are exactly
``Loader(..., rank=r, world_size=2)``'s (``batch_digest``), that resuming from the
framework's own checkpoint in a new process continues with the same batches and ends
with the same parameters, and that the wrappers that would re-split, replay or skip
batches are refused with a ``ConfigError`` on every rank (none hangs).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="torch is an optional extra (pip install torch)")

from _adapter_data import launch
from _framework_checks import RECIPE, WORLD, check_exact, run


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
def test_hf_trainer(root: Path, tmp_path: Path) -> None:
    pytest.importorskip("transformers", reason="pip install transformers (in the test extra)")
    records = run("hf_trainer_train.py", root, tmp_path)
    check_exact(root, records)
    for first, resumed in records:
        assert "DataLoaderDispatcher over 2 processes" in first["refused"]["stock"]
        assert "ignore_data_skip=True" in resumed["refused"]["skip"]
