"""A TorchDataset given no rank or world_size, iterated in a process that a launcher
started as one of several but with no torch.distributed process group, warns: every rank
would read the whole global batch. The environment is the input, set per test."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch", reason="torch is an optional extra (pip install torch)")

from headrace import torch as ht
from headrace.formats import TokenSource
from headrace.pipeline._loader_args import LAUNCHERS

EVERY = {v for _, count, rank in LAUNCHERS for v in (count, rank)} | {
    "SLURM_STEP_ID",
    "SLURM_STEP_NUM_TASKS",
}


@pytest.fixture
def src(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> TokenSource:
    for name in EVERY:
        monkeypatch.delenv(name, raising=False)
    np.arange(20_000, dtype=np.uint16).tofile(tmp_path / "t.bin")
    return TokenSource(tmp_path / "t.bin", dtype="uint16", context=16)


def _first_batch(ds: ht.TorchDataset) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        batch = next(iter(ds))
    assert len(batch["x"]) == 4  # the whole global batch, as host 0 of 1
    return [str(w.message) for w in caught]


def test_torchrun_without_a_process_group_warns(
    src: TokenSource, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "2")
    (said,) = _first_batch(ht.TorchDataset(src, batch_size=4, steps=3))
    assert said.startswith("TorchDataset: no rank or world_size given")
    assert "(torchrun) started it as one of 4 (WORLD_SIZE=4, RANK=2)" in said
    assert "init_process_group" in said


@pytest.mark.parametrize(
    "env", [{}, {"WORLD_SIZE": "1", "RANK": "0"}, {"SLURM_NTASKS": "4", "SLURM_PROCID": "0"}]
)
def test_one_process_is_not_warned(
    src: TokenSource, monkeypatch: pytest.MonkeyPatch, env: dict[str, str]
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert _first_batch(ht.TorchDataset(src, batch_size=4, steps=3)) == []


def test_ranks_given_are_not_warned(src: TokenSource, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "2")
    assert _first_batch(ht.TorchDataset(src, batch_size=4, steps=3, rank=0, world_size=1)) == []
