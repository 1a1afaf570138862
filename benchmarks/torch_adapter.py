"""Bare Loader vs the torch adapter (HeadraceDataLoader, stock DataLoader): batches/s, A/B/A/B.

Run: PYTHONPATH=src python benchmarks/torch_adapter.py [--batches 20000] [--trials 5] [--stock]

Sides: the bare Loader; HeadraceDataLoader with 0 and --workers (default 2)
workers, zero-copy and copy=True; with --stock, DataLoader(TorchDataset) too;
with --pair, only the bare Loader and HeadraceDataLoader with --workers.

Default data: a 1 GiB uint32 token file under /tmp, generated if missing.
Each trial builds a fresh loader (cold windows: blocks are read from the
page cache as samples need them) and times batches 2..N+1 (the first batch,
and the workers' start-up, are reported apart); the consumer does no work.
Both sides' SHA-256 digests over the same steps are printed and must be equal.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import os
import statistics
import time
from collections.abc import Callable, Iterator
from functools import partial
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader

from headrace.formats import TokenSource
from headrace.pipeline import DEFAULT_CHUNK_STEPS, Loader
from headrace.testing import update_digest
from headrace.torch import HeadraceDataLoader, TorchDataset

DEFAULT = Path("/tmp/headrace-bench-tokens-1g.u32")


def ensure_tokens(path: Path, gib: float = 1.0) -> None:
    if not path.exists():
        write_tokens(path, gib)
    # As `headrace bench` does: drop the file's clean pages and read them back, so the
    # page cache holds them as real reads leave it (large folios), not as written.
    with path.open("rb", buffering=0) as f:
        f.flush()
        os.fsync(f.fileno())
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        buf = bytearray(16 << 20)
        while f.readinto(buf):
            pass


def write_tokens(path: Path, gib: float) -> None:
    rng = np.random.default_rng(0)
    tmp = path.with_suffix(".tmp")
    with tmp.open("wb") as f:
        left = int(gib * (1 << 30)) // 4
        while left:
            n = min(left, 16 << 20)
            rng.integers(0, 50_257, n, dtype=np.uint32).tofile(f)
            left -= n
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def source(path: Path, context: int) -> TokenSource:
    return TokenSource(path, dtype="uint32", context=context)


def bare(path: Path, a: argparse.Namespace) -> Iterator[dict[str, Any]]:
    src = source(path, a.context)
    try:
        with Loader(src, batch_size=a.batch, seed=1) as ld:
            yield from ld
    finally:
        src.close()  # its windows are released now, not by a GC pass in the next side's trial


def adapter(
    path: Path, a: argparse.Namespace, contiguous: bool, workers: int | None = None
) -> Iterator[dict[str, Any]]:
    ds = TorchDataset(source(path, a.context), batch_size=a.batch, seed=1, contiguous=contiguous)
    yield from DataLoader(
        ds, batch_size=None, num_workers=a.workers if workers is None else workers
    )


def headrace_dl(
    path: Path, a: argparse.Namespace, workers: int, copy: bool = False, chunk: int | None = None
) -> Iterator[dict[str, Any]]:
    src = source(path, a.context)
    steps = DEFAULT_CHUNK_STEPS if chunk is None else chunk
    ds = TorchDataset(src, batch_size=a.batch, seed=1, chunk_steps=steps)
    try:
        with HeadraceDataLoader(ds, num_workers=workers, copy=copy) as dl:
            yield from dl
    finally:
        src.close()


def trial(batches: Iterator[dict[str, Any]], n: int) -> tuple[float, float]:
    """(seconds to the first batch, batches/s over the next n)."""
    t0 = time.perf_counter()
    next(batches)
    t1 = time.perf_counter()
    # The consumer takes each batch and does nothing with it, on every side: reading an
    # element costs 0.09 us through NumPy but 2.1 us through torch indexing (a new tensor),
    # which would charge torch's indexing, not the loader, to the torch sides (~7 % here).
    for _ in islice(batches, n):
        pass
    t2 = time.perf_counter()
    batches.close()  # type: ignore[attr-defined]
    gc.collect()  # whatever the side left for the collector goes now, outside every timing
    return t1 - t0, n / (t2 - t1)


def digest(batches: Iterator[dict[str, Any]], n: int) -> str:
    h = hashlib.sha256()
    for b in islice(batches, n):
        update_digest(h, {k: v.numpy() if isinstance(v, torch.Tensor) else v for k, v in b.items()})
    batches.close()  # type: ignore[attr-defined]
    return h.hexdigest()[:16]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--token-file", type=Path, default=DEFAULT)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--context", type=int, default=1024)
    p.add_argument("--batches", type=int, default=20_000)
    p.add_argument("--trials", type=int, default=5)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--stock", action="store_true", help="also time stock DataLoader sides")
    p.add_argument("--pair", action="store_true", help="only bare Loader and workers=k")
    p.add_argument(
        "--worker-chunks",
        type=int,
        nargs="*",
        default=[],
        help="also time workers with these chunk_steps (default: the adapter's)",
    )
    a = p.parse_args()
    if a.token_file == DEFAULT:
        ensure_tokens(DEFAULT)
    torch.set_num_threads(1)
    k = a.workers
    sides: dict[str, Callable[[], Iterator[dict[str, Any]]]] = {
        "bare Loader": lambda: bare(a.token_file, a),
        f"HeadraceDataLoader w={k}": lambda: headrace_dl(a.token_file, a, k),
    }
    if not a.pair:
        sides["HeadraceDataLoader w=0"] = lambda: headrace_dl(a.token_file, a, 0)
        sides[f"HeadraceDataLoader w={k} copy=True"] = lambda: headrace_dl(a.token_file, a, k, True)
    for c in a.worker_chunks:
        sides[f"HeadraceDataLoader w={k} chunk={c}"] = partial(
            headrace_dl, a.token_file, a, k, chunk=c
        )
    if a.stock:
        sides |= {
            "stock DataLoader(TorchDataset) w=0": lambda: adapter(a.token_file, a, False, 0),
            f"stock DataLoader(TorchDataset) w={k}": lambda: adapter(a.token_file, a, False),
        }
    runs: dict[str, list[tuple[float, float]]] = {k: [] for k in sides}
    for _ in range(a.trials):  # A/B/C, A/B/C, ...
        for name, make in sides.items():
            runs[name].append(trial(make(), a.batches))
    base = statistics.median(r[1] for r in runs["bare Loader"])
    print(
        f"B={a.batch} L={a.context} {a.batches} batches/trial, {a.trials} trials, "
        f"file {a.token_file} ({a.token_file.stat().st_size / 2**30:.2f} GiB)"
    )
    print(f"{'side':<36} {'first s':>8} {'batches/s':>10} {'vs bare':>8}  digest")
    for name, make in sides.items():
        first = statistics.median(r[0] for r in runs[name])
        rate = statistics.median(r[1] for r in runs[name])
        d = digest(make(), min(a.batches, 200))
        print(f"{name:<36} {first:>8.2f} {rate:>10.0f} {rate / base:>7.0%}  {d}")


if __name__ == "__main__":
    main()
