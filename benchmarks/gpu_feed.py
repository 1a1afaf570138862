"""Feeding a real GPU: accelerator utilisation of token batches, side by side (needs CUDA).

    python benchmarks/gpu_feed.py [--file PATH] [--steps 3000] [--batch 32] [--context 1024]
                                  [--compute-ms 1 0.25 0.05] [--workers 2] [--trials 3]

A training step here is: copy the batch to the GPU (``non_blocking`` from
pinned memory where the side pins), look its tokens up in an embedding table
(so the step really reads the batch), and spin the GPU for ``--compute-ms``
(``torch.cuda._sleep``: compute that costs the CPU nothing, as DLIO's sleep
does, but on the device's stream). Sides, alternating per trial:

``resident``   one batch already on the GPU, reused: the ceiling (no loader, no copy)
``loader``     the bare ``Loader`` (read-ahead thread), ``torch.from_numpy(x).cuda()``
``workers``    ``HeadraceDataLoader(num_workers=--workers, pin_memory=True)``, copies
               ``non_blocking``

AU = steps x compute time / wall time (the first 100 steps excluded), as DLIO
and MLPerf Storage define it. Each loader side also sums every token it fed on
the GPU: the two sums must be equal (the same batches reached the device).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from _out import out

from headrace.formats import TokenSource
from headrace.pipeline import Loader
from headrace.torch import HeadraceDataLoader, TorchDataset

WARMUP = 100


def cycles_per_ms() -> float:
    """GPU clock cycles ``torch.cuda._sleep`` spins per millisecond, measured."""
    torch.cuda._sleep(1_000_000)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(50_000_000)
    end.record()
    torch.cuda.synchronize()
    return 50_000_000 / start.elapsed_time(end)


def batches(side: str, a: argparse.Namespace) -> Iterator[Any]:
    """The side's batches as tensors of token ids (CPU, or already on the GPU)."""
    if side == "loader":
        src = TokenSource(a.file, dtype="uint32", context=a.context)
        with Loader(src, batch_size=a.batch, seed=1, steps=a.steps) as ld:
            for b in ld:
                yield torch.from_numpy(b["x"])
    else:
        ds = TorchDataset(
            TokenSource(a.file, dtype="uint32", context=a.context),
            batch_size=a.batch,
            seed=1,
            steps=a.steps,
        )
        with HeadraceDataLoader(ds, num_workers=a.workers, pin_memory=True) as dl:
            for b in dl:
                yield b["x"]


def run(side: str, a: argparse.Namespace, spin: int, table: torch.Tensor) -> dict[str, Any]:
    dev = table.device
    total = torch.zeros((), dtype=torch.float64, device=dev)
    if side == "resident":
        x = torch.randint(0, table.shape[0], (a.batch, a.context), device=dev)
        source: Iterator[Any] = (x for _ in range(a.steps))
    else:
        source = batches(side, a)
    t0 = 0.0
    n = 0
    for x in source:
        if n == WARMUP:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
        g = x.to(dev, non_blocking=True).long()  # uint32 ids: int64 for the lookup
        total += table[g].sum(dtype=torch.float64)
        torch.cuda._sleep(spin)
        n += 1
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    steps = n - WARMUP
    return {"steps": steps, "wall_s": wall, "sum": float(total.item())}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--file", type=Path, default=Path("/tmp/headrace-bench-tokens-1g.u32"))
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--compute-ms", type=float, nargs="+", default=[1.0, 0.25, 0.05])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--trials", type=int, default=3)
    a = ap.parse_args()
    if not torch.cuda.is_available():
        out("no CUDA device: nothing to measure")
        return 0
    if not a.file.exists():
        rng = np.random.default_rng(0)
        rng.integers(0, 50_257, (1 << 30) // 4, dtype=np.uint32).tofile(a.file)
    dev = torch.device("cuda")
    # One float per token id: the lookup reads the batch, the sum checks what arrived.
    table = torch.arange(50_257, dtype=torch.float32, device=dev)
    per_ms = cycles_per_ms()
    out(
        f"{torch.cuda.get_device_name()}, B={a.batch} L={a.context}, {a.steps} steps "
        f"({WARMUP} warm-up), workers {a.workers}, {a.trials} trials alternating"
    )
    out("| compute ms | side | steps/s | AU | token sum |")
    out("|---|---|---|---|---|")
    ok = True
    sides = ["resident", "loader", "workers"]
    for ms in a.compute_ms:
        spin = int(ms * per_ms)
        res: dict[str, list[dict[str, Any]]] = {s: [] for s in sides}
        for t in range(a.trials):
            for side in sides if t % 2 == 0 else sides[::-1]:
                res[side].append(run(side, a, spin, table))
        sums = {s: {r["sum"] for r in rs} for s, rs in res.items() if s != "resident"}
        ok &= len(sums["loader"] | sums["workers"]) == 1
        for side, rs in res.items():
            rate = statistics.median(r["steps"] / r["wall_s"] for r in rs)
            au = min(1.0, rate * ms / 1e3)
            total = "-" if side == "resident" else f"{rs[0]['sum']:.6g}"
            out(f"| {ms:g} | {side} | {rate:,.0f} | {au:.3f} | {total} |")
    out("the loader sides fed the same tokens:", ok)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
