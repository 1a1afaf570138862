"""Bare Loader vs JaxLoader (global jax.Arrays over CPU devices): batches/s, A/B/A/B.

Run: PYTHONPATH=src python benchmarks/jax_adapter.py [--batches 1500] [--trials 4] [--devices 8]

Sides, alternating in every trial: the bare NumPy Loader; JaxLoader under
``P("data")`` over ``--devices`` CPU devices, the consumer doing nothing; the same
with a jitted step (a sum of both fields) dispatched on every batch and waited for
at the end. Data: a 256 MiB uint32 token file under /tmp (generated if missing);
B=32, L=1024. Each side's SHA-256 over its first 50 batches (made NumPy again) is
printed: all must be equal. Also times ``make_global_batch`` alone against jax's own
``make_array_from_process_local_data`` per field, on one fixed batch.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

FILE = Path("/tmp/headrace-bench-tokens-256m.u32")
B, L, HASHED = 32, 1024, 50


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, default=1500)
    ap.add_argument("--trials", type=int, default=4)
    ap.add_argument("--devices", type=int, default=8)
    args = ap.parse_args()
    # Before jax starts its backend: the number of CPU devices is fixed then.
    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={args.devices}"
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from headrace.formats import TokenSource
    from headrace.jax import JaxLoader, make_global_batch
    from headrace.pipeline import Loader
    from headrace.testing import update_digest

    if not FILE.exists():
        rng = np.random.default_rng(0)
        rng.integers(0, 50_000, 64 * 2**20, dtype=np.uint32).tofile(FILE)
    sharding = NamedSharding(jax.make_mesh((args.devices,), ("data",)), P("data"))
    n = args.batches

    def source() -> TokenSource:
        return TokenSource([FILE], dtype="uint32", context=L)

    @jax.jit
    def step(b: dict[str, Any]) -> Any:
        return b["x"].sum() + b["y"].sum()

    def bare() -> tuple[float, str]:
        h = hashlib.sha256()
        with Loader(source(), batch_size=B, seed=1, steps=n) as ld:
            t = time.perf_counter()
            for i, b in enumerate(ld):
                if i < HASHED:
                    update_digest(h, b)
            return n / (time.perf_counter() - t), h.hexdigest()[:16]

    def jaxed(jit: bool) -> tuple[float, str]:
        h, out = hashlib.sha256(), None
        with JaxLoader(source(), batch_size=B, sharding=sharding, seed=1, steps=n) as ld:
            t = time.perf_counter()
            for i, b in enumerate(ld):
                if jit:
                    out = step(b)
                if i < HASHED:
                    update_digest(h, {k: np.asarray(v) for k, v in b.items()})
            jax.block_until_ready(out)
            return n / (time.perf_counter() - t), h.hexdigest()[:16]

    sides: dict[str, Callable[[], tuple[float, str]]] = {
        "bare Loader": bare,
        "JaxLoader": lambda: jaxed(False),
        "JaxLoader + jit step": lambda: jaxed(True),
    }
    results: dict[str, list[tuple[float, str]]] = {k: [] for k in sides}
    for _ in range(args.trials):
        for name, run in sides.items():
            results[name].append(run())
    for name, runs in results.items():
        rates = [r for r, _ in runs]
        digests = sorted({d for _, d in runs})
        print(
            f"{name:22s} median {statistics.median(rates):8.0f} batches/s  "
            f"{[round(r) for r in rates]}  digest {digests}"
        )

    tok = np.random.default_rng(0).integers(0, 50_000, (B, L + 1), dtype=np.uint32)
    local = {"x": tok[:, :-1], "y": tok[:, 1:]}
    make: Any = jax.make_array_from_process_local_data

    def per_call(fn: Callable[[], Any], reps: int = 300) -> float:
        best = float("inf")
        for _ in range(3):
            t = time.perf_counter()
            for _ in range(reps):
                out = fn()
            jax.block_until_ready(out)
            best = min(best, (time.perf_counter() - t) / reps)
        return best * 1e6

    ours = per_call(lambda: make_global_batch(local, sharding, B))
    theirs = per_call(lambda: [make(sharding, a, (B, L)) for a in local.values()])
    print(
        f"make_global_batch {ours:.0f} us/batch; jax's make_array_from_process_local_data "
        f"for the same 2 fields {theirs:.0f} us (best of 3 x 300)"
    )


if __name__ == "__main__":
    main()
