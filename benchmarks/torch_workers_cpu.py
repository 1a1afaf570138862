"""Where a batch's CPU time goes: bare Loader vs HeadraceDataLoader workers (per-batch breakdown).

Run: PYTHONPATH=src python benchmarks/torch_workers_cpu.py [--batches 2000] [--trials 3]

For each side: wall time per batch, and CPU time per batch of the main process
(all its threads) and of the worker processes (from /proc/PID/stat, Linux).
Then the loader's own work per batch it delivers, with a stride of 1 (bare)
and 2 (one of two workers), over cold windows (fresh, pages not yet mapped
in this process) and warm ones (the same steps again): the difference is the
cost of populating a window's pages, which every worker pays for itself.
Uses the 1 GiB token file of benchmarks/torch_adapter.py.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from itertools import islice
from pathlib import Path

import torch

from headrace._shm_ring import RingConfig, WorkerBatches
from headrace.formats import TokenSource
from headrace.pipeline import Loader
from headrace.torch import WORKER_CHUNK_BYTES

FILE = Path("/tmp/headrace-bench-tokens-1g.u32")
TICK = os.sysconf("SC_CLK_TCK")


def proc_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def source() -> TokenSource:
    return TokenSource(FILE, dtype="uint32", context=1024)


def bare(n: int) -> tuple[float, float, float]:
    with Loader(source(), batch_size=32, seed=1) as ld:
        it = iter(ld)
        next(it)
        c0, t0 = time.process_time(), time.perf_counter()
        for b in islice(it, n):
            {k: torch.from_numpy(a) for k, a in b.items()}["x"][0, 0]
        return (time.perf_counter() - t0) / n, (time.process_time() - c0) / n, 0.0


def workers(k: int, chunk: int, n: int) -> tuple[float, float, float]:
    # As HeadraceDataLoader sets it up: 4 chunk slots a worker, chunks of at most 16 MiB.
    loader = {"batch_size": 32, "seed": 1, "prefetch": 0, "chunk_steps": chunk}
    loader["chunk_bytes"] = WORKER_CHUNK_BYTES
    wb = WorkerBatches(RingConfig(source=source(), loader=loader, workers=k, slots=4))
    it = iter(wb)
    next(it)
    pids = [p.pid for p in wb._procs if p.pid is not None]
    w0 = [proc_cpu(p) for p in pids]
    c0, t0 = time.process_time(), time.perf_counter()
    for b in islice(it, n):
        {k: torch.from_numpy(a) for k, a in b.items()}["x"][0, 0]
    wall, main = (time.perf_counter() - t0) / n, (time.process_time() - c0) / n
    wcpu = sum(proc_cpu(p) - c for p, c in zip(pids, w0, strict=True)) / n
    it.close()  # type: ignore[attr-defined]
    return wall, main, wcpu


def loader_work(stride: int, n: int) -> tuple[float, float]:
    """CPU per delivered batch of a synchronous loader: cold windows, then warm."""
    ld = Loader(source(), batch_size=32, seed=1, prefetch=0, step_stride=stride)
    out = []
    for _ in ("cold", "warm"):
        ld.step = 0
        c0 = time.process_time()
        got = sum(1 for _ in islice(iter(ld), n // stride))
        out.append((time.process_time() - c0) / got)
    ld.close()
    return out[0], out[1]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--batches", type=int, default=2000)
    p.add_argument("--trials", type=int, default=3)
    a = p.parse_args()
    torch.set_num_threads(1)
    n = a.batches
    sides: dict[str, Callable[[], tuple[float, float, float]]] = {
        "bare Loader": lambda: bare(n),
        "workers=1": lambda: workers(1, 32, n),
        "workers=2": lambda: workers(2, 32, n),
        "workers=2, chunks of 8": lambda: workers(2, 8, n),
    }
    runs: dict[str, list[tuple[float, float, float]]] = {k: [] for k in sides}
    for _ in range(a.trials):
        for name, run in sides.items():
            runs[name].append(run())
    base = statistics.median(r[0] for r in runs["bare Loader"])
    print(f"{'side':<24} {'wall us':>8} {'rate':>6} {'main CPU':>9} {'workers':>8} {'total':>6}")
    for name, rs in runs.items():
        wall, main_, wk = (statistics.median(r[i] for r in rs) * 1e6 for i in range(3))
        rate = base * 1e6 / wall
        print(f"{name:<24} {wall:>8.0f} {rate:>6.0%} {main_:>9.0f} {wk:>8.0f} {main_ + wk:>6.0f}")
    print("loader work, CPU us per delivered batch (median of trials): cold / warm windows")
    for stride in (1, 2):
        cw = [loader_work(stride, n) for _ in range(a.trials)]
        cold, warm = (statistics.median(x[i] for x in cw) * 1e6 for i in range(2))
        print(f"  stride {stride}: {cold:.0f} / {warm:.0f}")


if __name__ == "__main__":
    main()
