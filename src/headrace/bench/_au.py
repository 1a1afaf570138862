"""Accelerator utilisation: simulated compute beside the loader, as DLIO defines AU.

AU = compute time / wall time over the steps (the first left out), with the
accelerator simulated by ``time.sleep`` so that, like a real device, it leaves
the CPU and the GIL to the loader while it computes.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import numpy as np
from numpy.typing import NDArray

from headrace.bench._kind import Batch, Kind

__all__ = ["au_trial", "compute_times", "demand_bytes_per_s", "max_accelerators"]


def compute_times(t: Any, steps: int) -> NDArray[np.float64]:
    """Simulated compute seconds per step: constant or normal (clipped at 0), keyed by seed."""
    if t.computation_time_stdev == 0:
        return np.full(steps, t.computation_time)
    rng = np.random.default_rng([t.seed, 0x434F4D50])
    draw = rng.normal(t.computation_time, t.computation_time_stdev, steps)
    return np.maximum(draw, 0.0)


def au_trial(
    it: Iterator[Batch], steps: int, compute: NDArray[np.float64], accelerators: int
) -> tuple[float, float, float]:
    """(wall, compute, loader) seconds for ``steps`` steps of ``accelerators`` batches each.

    The accelerator is simulated with ``time.sleep``: like a real device it
    leaves the CPU (and the GIL) to the loader's threads while it computes.
    AU = compute / wall, as DLIO and MLPerf Storage define it.
    """
    comp = load = 0.0
    t0 = time.perf_counter()
    for i in range(steps):
        a = time.perf_counter()
        for _ in range(accelerators):
            next(it)
        b = time.perf_counter()
        load += b - a
        time.sleep(float(compute[i]))
        comp += time.perf_counter() - b
    return time.perf_counter() - t0, comp, load


def demand_bytes_per_s(kind: Kind, accelerators: int = 1) -> float | None:
    """Payload the accelerators consume per second: N x batch x record / compute time."""
    t = kind.workload.train
    if t.computation_time <= 0:
        return None
    return accelerators * kind.host_batch * kind.record_bytes() / t.computation_time


def max_accelerators(kind: Kind, spec: str, *, probe_steps: int | None = None) -> int:
    """The most simulated accelerators ``spec`` keeps at the AU threshold.

    N accelerators need N batches per compute time. Doubling finds a bracket,
    bisection the edge; each probe is a fresh stream (first step excluded).
    """
    t = kind.workload.train
    steps = probe_steps or max(4, min(t.steps, 16))
    comp = compute_times(t, steps)

    def ok(n: int) -> bool:
        stream = kind.open(spec, 1 + steps * n)
        try:
            it = iter(stream)
            next(it)
            wall, c, _ = au_trial(it, steps, comp, n)
        finally:
            stream.close()
        return c / wall >= t.au_threshold

    if not ok(1):
        return 0
    lo, hi = 1, 2
    while hi <= 4096 and ok(hi):
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo
