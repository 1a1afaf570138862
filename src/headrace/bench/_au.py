"""Accelerator utilisation: simulated compute beside the loader, as DLIO defines AU.

AU follows DLIO (argonne-lcf/dlio_benchmark, dlio_benchmark/utils/statscounter.py):
each epoch (here a trial) is measured on its own, its first step left out
(``StatsCounter.compute_metrics_train`` with ``metric_exclude_start_steps=1``,
the default in ``utils/config.py``), and the run's AU is the plain mean of the
epochs' AUs (``StatsCounter.end_run``: ``np.mean(train_au)``). The accelerator
is simulated by ``time.sleep`` so that, like a real device, it leaves the CPU
and the GIL to the loader while it computes.

Unlike DLIO, each fresh stream first runs a warm-up epoch (:data:`WARMUP_EPOCHS`),
measured and reported (``au_warmup``) but kept out of the mean: the first epoch of a
fresh stream starts its read-ahead, thread pools and allocations from nothing, and
weighed on the mean of the few epochs a bench runs (see :func:`au_epochs`).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from headrace.bench._kind import Batch, Kind
from headrace.bench._workload import WARMUP_EPOCHS
from headrace.errors import HeadraceError

__all__ = [
    "EXCLUDE_START_STEPS",
    "MOST_ACCELERATORS",
    "WARMUP_EPOCHS",
    "Accelerator",
    "au_epochs",
    "au_trial",
    "compute_times",
    "default_probe_steps",
    "demand_bytes_per_s",
    "drawn_records",
    "epoch_au",
    "max_accelerators",
    "run_au",
]

#: DLIO's ``metric_exclude_start_steps`` default: the first step of every epoch is left out.
EXCLUDE_START_STEPS = 1

#: The most simulated accelerators :func:`max_accelerators` tries: a variant that keeps
#: AU there is reported at it, "at least" (a note says so).
MOST_ACCELERATORS = 4096


def compute_times(t: Any, steps: int) -> NDArray[np.float64]:
    """Simulated compute seconds per step: constant or normal (clipped at 0), keyed by seed."""
    if t.computation_time_stdev == 0:
        return np.full(steps, t.computation_time)
    rng = np.random.default_rng([t.seed, 0x434F4D50])
    draw = rng.normal(t.computation_time, t.computation_time_stdev, steps)
    return np.maximum(draw, 0.0)


def epoch_au(wall: float, proc: Sequence[float], compute: Sequence[float]) -> float:
    """One epoch's AU as DLIO computes it, a fraction (DLIO prints it x100).

    ``proc[i]`` is step i's load plus compute, ``compute[i]`` its compute, ``wall``
    the epoch's seconds from start to end. As in DLIO's
    ``StatsCounter.compute_metrics_train``: the compute of the steps after the
    first over the wall time less the first step's load and compute; no compute
    left (an epoch of one step) is AU 0.
    """
    s = EXCLUDE_START_STEPS
    counted = float(sum(compute[s:]))
    if counted == 0:
        return 0.0
    return counted / (wall - float(sum(proc[:s])))


def run_au(epochs: Sequence[float]) -> float:
    """The run's AU: the plain mean of its epochs' (``StatsCounter.end_run`` in DLIO), not
    the run's compute over its wall time, which weighs long epochs more."""
    return statistics.fmean(epochs)


class Accelerator:
    """A simulated accelerator: ``time.sleep`` for each step's compute, less what earlier
    sleeps overran, so that over the steps it computes for the time asked for.

    A sleep overruns its time by the kernel's timer slack (50 us by default) and more:
    here ``time.sleep(35e-6)``, CosmoFlow's compute at ``--record-scale 0.01``, took 101 us,
    so each step computed 2.9x the time asked for, the accelerator asked for a third of
    the demand the run printed, and AU and ``max acc.`` credited the loader with the
    rest. The time slept past one step's compute is taken off the next steps' (a step
    owed nothing does not sleep): what it computed in all exceeds what was asked for by
    one overrun at most."""

    def __init__(self) -> None:
        self.owed = 0.0  # compute asked for and not yet slept (< 0: slept ahead)

    def compute(self, seconds: float) -> float:
        """Compute for ``seconds`` (less any time slept ahead); the seconds it slept."""
        self.owed += seconds
        start = time.perf_counter()
        if self.owed > 0:
            time.sleep(self.owed)
        slept = time.perf_counter() - start
        self.owed -= slept
        return slept


def au_trial(
    it: Iterator[Batch], steps: int, compute: NDArray[np.float64], accelerators: int
) -> tuple[float, float | None]:
    """(AU, loader seconds per counted step) of one epoch: ``steps`` steps of
    ``accelerators`` batches each, the first left out as :func:`epoch_au` does. An epoch
    of one step counts none: its loader seconds are ``None`` (0.0 read as a loader that
    kept the accelerator fed, beside AU 0).

    The accelerator is simulated with ``time.sleep``: like a real device it
    leaves the CPU (and the GIL) to the loader's threads while it computes.
    """
    proc = np.zeros(steps)
    comp = np.zeros(steps)
    load = np.zeros(steps)
    device = Accelerator()
    t0 = time.perf_counter()
    for i in range(steps):
        a = time.perf_counter()
        for k in range(accelerators):
            try:
                next(it)
            except StopIteration:  # out of the run, it ended it: every figure lost
                raise HeadraceError(
                    f"its stream ended after {i * accelerators + k:,} of the "
                    f"{steps * accelerators:,} batches of an epoch with compute ({steps:,} "
                    f"steps of {accelerators:,}): a variant must deliver every step it is "
                    "asked for"
                ) from None
        b = time.perf_counter()
        if i == EXCLUDE_START_STEPS:
            # The step left out carries nothing into those counted: its overrun is not in
            # AU's compute, and taken off theirs (a sleep the scheduler held 0.2 s, under
            # load) it left them less compute than asked for, and AU low.
            device = Accelerator()
        device.compute(float(compute[i]))
        c = time.perf_counter()
        load[i], comp[i], proc[i] = b - a, c - b, c - a
    wall = time.perf_counter() - t0
    counted = load[EXCLUDE_START_STEPS:]
    return epoch_au(wall, proc.tolist(), comp.tolist()), float(
        counted.mean()
    ) if counted.size else None


def au_epochs(
    kind: Kind,
    spec: str,
    accelerators: int,
    compute: NDArray[np.float64],
    steps: int,
    done: Callable[[tuple[float, float | None]], None] | None = None,
    warmed: Callable[[tuple[float, float | None]], None] | None = None,
) -> list[tuple[float, float | None]]:
    """The AU column's measurement of ``spec`` at ``accelerators``: one fresh stream, its
    epochs (DLIO's; the run's trials) of ``steps`` steps back to back, as many as
    ``compute`` holds steps for, each computing its part of ``compute``; each epoch's
    :func:`au_trial`, in order, ``done`` told of each as it ends (a run stopped keeps them).

    Before them, :data:`WARMUP_EPOCHS` warm-up epochs of ``steps`` steps on the same stream,
    computing the first epoch's part of ``compute``: each one's :func:`au_trial` goes to
    ``warmed``, not into the list. A fresh stream's first epoch was below the mean of the
    epochs after it in 9 of 12 variants' runs of DLIO UNet3D (``--record-scale 0.02``, 2c
    under load, 2026-12-07; by 0.08 on average, headrace 0.14 against 0.36 at most), and
    the mean of 5 carried a fifth of that (AU 0.31 where the later 4 gave 0.36).

    :func:`max_accelerators` judges every count by this same measurement: judged on one
    epoch of 7 steps of its own, `--accelerators auto` said 1 where the AU column of
    `--accelerators 2`, 5 trials of 6 steps, passed at 0.98 (UNet3D, 2026-12-07).
    """
    stream = kind.open(spec, (len(compute) + WARMUP_EPOCHS * steps) * accelerators)
    out: list[tuple[float, float | None]] = []
    try:
        it = iter(stream)
        for _ in range(WARMUP_EPOCHS):
            warm = au_trial(it, steps, compute[:steps], accelerators)
            if warmed is not None:
                warmed(warm)
        for start in range(0, len(compute) - steps + 1, steps):
            out.append(au_trial(it, steps, compute[start : start + steps], accelerators))
            if done is not None:
                done(out[-1])
    finally:
        stream.close()
    return out


def demand_bytes_per_s(kind: Kind, accelerators: int = 1) -> float | None:
    """Payload the accelerators consume per second: N x batch x record / compute time."""
    t = kind.workload.train
    if t.computation_time <= 0:
        return None
    return accelerators * kind.host_batch * kind.record_bytes() / t.computation_time


def drawn_records(kind: Kind) -> tuple[float, float] | None:
    """(The dataset's mean record, the workload's) where record sizes are drawn with a stdev
    and their mean here is more than 1% off the workload's, which sets the demand apart from
    the one a reader works out from the YAML (UNet3D's 42 files at --scale 0.25 average
    1.33 MB, not 1.47: 2.89 GB/s, not 3.18); else ``None``."""
    asked = kind.workload.dataset.get("record_bytes")
    spread = kind.workload.dataset.get("record_bytes_stdev")
    if not spread or not isinstance(asked, int | float) or asked <= 0:
        return None
    here = kind.record_bytes()
    return (here, float(asked)) if abs(here / asked - 1) > 0.01 else None


def default_probe_steps(t: Any) -> int:
    """Steps of each epoch :func:`max_accelerators` probes where the run's trials are of one
    step (AU 0 by definition): the trial's, 5 to 17, its first not counted."""
    return 1 + max(4, min(int(t.steps), 16))


def max_accelerators(
    kind: Kind,
    spec: str,
    *,
    probe_steps: int | None = None,
    known: tuple[int, bool] | None = None,
    most: int = MOST_ACCELERATORS,
) -> int:
    """The most simulated accelerators ``spec`` keeps at the AU threshold.

    N accelerators need N batches per compute time. Doubling finds a bracket,
    bisection the edge; each count is judged by the AU column's measurement at it
    (:func:`au_epochs`: a fresh stream, the run's trials of its steps, their compute, AU
    their mean), so "max acc. M" is what `--accelerators M` would show as passing, and
    M + 1 as failing (but for the noise of two measurements). Where the run's trials are
    of one step (AU 0 by definition), epochs of :func:`default_probe_steps` (or
    ``probe_steps``), as many. ``known`` is the run's own verdict, ``(N, passed)``: the
    AU column at N, not measured again (probed again, one short epoch on a busy machine
    gave "max 0" beside "AU 1.00 ok"). Doubling stops at ``most``: a variant that
    passes there is reported at it (or at ``known``'s N, where that is more), never at a
    count it was not tried at (it was bisected towards twice the top, and 8191 reported).
    """
    t = kind.workload.train
    steps = probe_steps or (t.steps if t.steps > EXCLUDE_START_STEPS else default_probe_steps(t))
    comp = compute_times(t, t.trials * steps)

    def ok(n: int) -> bool:
        epochs = au_epochs(kind, spec, n, comp, steps)
        return run_au([a for a, _ in epochs]) >= t.au_threshold

    lo, hi = 0, 0  # lo passes (0 trivially), hi fails; 0: not known yet
    if known is not None:
        n, passed = known
        lo, hi = (n, 0) if passed else (0, n)
    if lo == 0 and hi != 1:
        if not ok(1):
            return 0
        lo = 1
    while hi == 0:
        if lo >= most:
            return lo  # kept AU at the most it tries: at least this many
        nxt = min(lo * 2, most)
        lo, hi = (nxt, 0) if ok(nxt) else (lo, nxt)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo
