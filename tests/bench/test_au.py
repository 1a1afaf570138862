"""AU as DLIO computes it: per epoch, its first step left out; the run's AU the epochs' mean."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from headrace.bench._au import au_trial, epoch_au, max_accelerators, run_au
from headrace.bench._kind import make_kind
from headrace.bench._workload import builtin_workloads


def test_two_epochs_by_hand() -> None:
    # Epoch 0: 3 steps in 1.0 s, the first (loader start-up) 0.5 s of it; 0.1 s compute each.
    # Counted: steps 1-2, compute 0.2 s over 1.0 - 0.5 = 0.5 s of wall: AU 0.4.
    first = epoch_au(1.0, [0.5, 0.3, 0.2], [0.1, 0.1, 0.1])
    # Epoch 1: 4 steps in 0.5 s, the first 0.2 s; compute 0.3 s over 0.3 s: AU 1.0.
    second = epoch_au(0.5, [0.2, 0.1, 0.1, 0.1], [0.1, 0.1, 0.1, 0.1])
    assert first == pytest.approx(0.4)
    assert second == pytest.approx(1.0)
    # The run's AU is the mean of the epochs', 0.7; the run's counted compute over its
    # counted wall would be (0.2 + 0.3) / (0.5 + 0.3) = 0.625, and leaving out only the
    # run's first step (headrace before) (0.2 + 0.4) / (1.5 - 0.5) = 0.6.
    assert run_au([first, second]) == pytest.approx(0.7)


def test_an_epoch_of_one_step_has_nothing_counted() -> None:
    # DLIO: no compute left after the excluded step is AU 0, not a division by the rest.
    assert epoch_au(0.3, [0.3], [0.1]) == 0.0


def _slow_first(n: int, first_s: float) -> Iterator[int]:
    time.sleep(first_s)
    yield 0
    yield from range(1, n)


def test_each_trials_first_step_is_left_out() -> None:
    # Every trial's first batch takes 0.4 s, the others nothing; compute is 0.05 s a step.
    # Counting the first step would give at most 0.15 / 0.55 = 0.27; leaving it out, the
    # two counted steps are all compute (AU near 1, less the loop's own overhead).
    compute = np.full(3, 0.05)
    for _ in range(2):
        au, load = au_trial(_slow_first(3, 0.4), 3, compute, 1)
        assert au > 0.5
        assert load < 0.2  # the slow first load is not in the loader's time per step either


def test_max_accelerators_agrees_with_the_runs_own_verdict(tmp_path: Path) -> None:
    # --accelerators auto printed "max acc. 0" beside "AU 1.00 ok": the search probed one
    # accelerator again, on one short epoch, and a busy machine failed it. The run's
    # verdict (its trials with compute) is where the search starts now. Here every probe
    # fails (20 ms of preprocessing a sample against 1 ms of compute a step).
    wl = builtin_workloads()["npz"].replace(
        dataset={"files": 4, "record_bytes": 1_000},
        reader={"preprocess_time": 0.02},
        train={"steps": 3, "trials": 1, "warmup_steps": 1, "batch_size": 2},
    )
    kind = make_kind(wl.replace(train={"computation_time": 0.001}), str(tmp_path))
    kind.generate()
    assert max_accelerators(kind, "headrace", probe_steps=2) == 0
    assert max_accelerators(kind, "headrace", probe_steps=2, known=(1, True)) == 1
    assert max_accelerators(kind, "headrace", probe_steps=2, known=(1, False)) == 0
