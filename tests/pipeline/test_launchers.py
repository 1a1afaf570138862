"""A Loader given no rank or world_size, in a process a launcher started as one of
several (torchrun, Open MPI, MPICH, srun), warns naming the launcher and its variables;
the environment is the input here, set per test."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from headrace.formats import TokenSource
from headrace.pipeline import Loader
from headrace.pipeline._loader_args import LAUNCHERS

EVERY = {v for _, count, rank in LAUNCHERS for v in (count, rank)} | {
    "SLURM_STEP_ID",
    "SLURM_STEP_NUM_TASKS",
}


@pytest.fixture
def src(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> TokenSource:
    for name in EVERY:  # this test's environment, not the one pytest was started in
        monkeypatch.delenv(name, raising=False)
    np.arange(20_000, dtype=np.uint16).tofile(tmp_path / "t.bin")
    return TokenSource(tmp_path / "t.bin", dtype="uint16", context=16)


def _warning(src: TokenSource) -> str | None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ld = Loader(src, batch_size=4)
        assert (ld.rank, ld.world_size) == (0, 1)
        assert len(next(iter(ld))["x"]) == 4  # the whole global batch, as host 0 of 1
        ld.close()
    assert len(caught) <= 1
    return str(caught[0].message) if caught else None


@pytest.mark.parametrize(
    ("env", "named"),
    [
        (
            {"OMPI_COMM_WORLD_SIZE": "8", "OMPI_COMM_WORLD_RANK": "5"},
            "(Open MPI) started it as one of 8 (OMPI_COMM_WORLD_SIZE=8, OMPI_COMM_WORLD_RANK=5)",
        ),
        (
            {"PMI_SIZE": "2", "PMI_RANK": "1"},
            "(MPICH) started it as one of 2 (PMI_SIZE=2, PMI_RANK=1)",
        ),
        (
            {"SLURM_NTASKS": "4", "SLURM_PROCID": "3", "SLURM_STEP_ID": "0"},
            "(srun) started it as one of 4 (SLURM_NTASKS=4, SLURM_PROCID=3, SLURM_STEP_ID=0)",
        ),
        # srun's step count, not the allocation's: srun -n 2 in a 16-task allocation
        (
            {
                "SLURM_NTASKS": "16",
                "SLURM_STEP_NUM_TASKS": "2",
                "SLURM_PROCID": "1",
                "SLURM_STEP_ID": "3",
            },
            "(srun) started it as one of 2 (SLURM_STEP_NUM_TASKS=2, SLURM_PROCID=1, "
            "SLURM_STEP_ID=3)",
        ),
        # torchrun under srun: both named, torchrun's count
        (
            {
                "WORLD_SIZE": "8",
                "RANK": "6",
                "SLURM_NTASKS": "2",
                "SLURM_PROCID": "1",
                "SLURM_STEP_ID": "0",
            },
            "(torchrun, srun) started it as one of 8 (WORLD_SIZE=8, RANK=6, SLURM_NTASKS=2, "
            "SLURM_PROCID=1, SLURM_STEP_ID=0)",
        ),
    ],
)
def test_each_launcher_is_named_with_its_variables_and_the_fix(
    src: TokenSource, monkeypatch: pytest.MonkeyPatch, env: dict[str, str], named: str
) -> None:
    # Under srun or mpirun, a Loader without rank/world_size gave every task the same rows
    # without a word: only torchrun's WORLD_SIZE was looked at (fails before: no warning).
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    text = _warning(src)
    assert text is not None and f"but its launcher {named}: every rank would read" in text
    assert "Pass rank= and world_size= (torch.distributed.get_rank()" in text
    assert "give world_size=1 to read the whole batch here on purpose" in text
    # Given, the warning is not (filterwarnings = error).
    Loader(src, batch_size=4, rank=1, world_size=2).close()
    Loader(src, batch_size=4, world_size=1).close()


@pytest.mark.parametrize(
    "env",
    [
        {},
        # sbatch's shell: one process, even with --ntasks=4 (no SLURM_STEP_ID: no srun)
        {"SLURM_NTASKS": "1", "SLURM_PROCID": "0"},
        {"SLURM_NTASKS": "4", "SLURM_PROCID": "0"},
        # srun of one task, in an allocation of 4
        {"SLURM_NTASKS": "4", "SLURM_STEP_NUM_TASKS": "1", "SLURM_STEP_ID": "0"},
        {"SLURM_NTASKS": "1", "SLURM_PROCID": "0", "SLURM_STEP_ID": "0"},
        {"OMPI_COMM_WORLD_SIZE": "1", "OMPI_COMM_WORLD_RANK": "0"},
        {"PMI_SIZE": "1"},
        {"WORLD_SIZE": "1"},
        {"WORLD_SIZE": "", "PMI_SIZE": "many"},  # not a count: not a launch of several
    ],
)
def test_a_single_process_launch_is_not_warned(
    src: TokenSource, monkeypatch: pytest.MonkeyPatch, env: dict[str, str]
) -> None:
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert _warning(src) is None
