"""What the processes' check costs a ``numpy_loader`` iteration: A/B on 2 jax processes.

Run: PYTHONPATH=src python benchmarks/jax_numpy_agree.py [--rounds 20] [--batches 50]

Starts 2 ``jax.distributed`` processes on CPU (2 devices each, gloo). Each times, in
alternating rounds, an iteration of ``--batches`` batches (each made a global array by
``make_global_batch``) from two loaders of the same rows: ``numpy_loader(...,
sharding=s)``, whose iteration starts by comparing the processes' loaders, and
a ``headrace.pipeline.Loader(..., rank=, world_size=)`` (the same rows, not compared;
a ``numpy_loader`` of those is compared too, its world size being the process count).
Both resume from step 0 each round, so both read the same batches; the processes meet (a
barrier, not timed) before each timed iteration. Each process prints its
medians, the difference (the check's cost an iteration), the first batch's time for
each, and each side's SHA-256 over its rows of every batch (equal either side), and the
median time of the check alone.
Data: a 16 MiB uint32 token file under /tmp (generated if missing); B=32, L=1024.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

FILE = Path("/tmp/headrace-bench-tokens-16m.u32")
B, L = 32, 1024


def child(port: int, pid: int, rounds: int, batches: int) -> None:
    import jax

    jax.config.update("jax_num_cpu_devices", 2)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=2, process_id=pid)
    from jax.experimental import multihost_utils
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from headrace.formats import TokenSource
    from headrace.jax import make_global_batch, numpy_loader
    from headrace.jax._agree import check_agreement
    from headrace.pipeline import Loader
    from headrace.testing import batch_digest

    sharding = NamedSharding(jax.make_mesh((jax.device_count(),), ("data",)), P("data"))
    src = TokenSource([FILE], dtype="uint32", context=L)
    sides = {
        "checked": numpy_loader(src, batch_size=B, seed=1, sharding=sharding),
        "unchecked": Loader(src, batch_size=B, seed=1, rank=pid, world_size=2),
    }
    start = sides["checked"].state_dict()
    times: dict[str, list[float]] = {k: [] for k in sides}
    first: dict[str, list[float]] = {k: [] for k in sides}
    digests: dict[str, set[str]] = {k: set() for k in sides}
    for r in range(rounds):
        for name in sorted(sides, reverse=bool(r % 2)):  # A/B, then B/A
            ld = sides[name]
            ld.load_state_dict(start)
            got = []
            # Both processes start each timed iteration together: the check waits for
            # the other process, and how far apart they drifted is not the check's cost.
            multihost_utils.sync_global_devices(f"{r}/{name}")
            t = time.perf_counter()
            it = iter(ld)
            for i in range(batches):
                b = next(it)
                make_global_batch(b, sharding, B)
                got.append(b)
                if i == 0:
                    first[name].append(time.perf_counter() - t)
            times[name].append(time.perf_counter() - t)
            del it
            digests[name].add(batch_digest(got))
    # The check alone, as each iteration start makes it (after a barrier, as above).
    alone = []
    for r in range(rounds):
        multihost_utils.sync_global_devices(f"alone/{r}")
        t = time.perf_counter()
        check_agreement(sides["checked"], "numpy_loader")
        alone.append(time.perf_counter() - t)
    for ld in sides.values():
        ld.close()
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    fst = {k: statistics.median(v) * 1e3 for k, v in first.items()}
    print(
        f"process {pid}: iteration of {batches} batches, median of {rounds}: checked "
        f"{med['checked']:.2f} ms, unchecked {med['unchecked']:.2f} ms (difference "
        f"{med['checked'] - med['unchecked']:+.2f} ms, ratio "
        f"{med['checked'] / med['unchecked']:.3f}); "
        f"first batch {fst['checked']:.2f} vs {fst['unchecked']:.2f} ms; digests "
        f"{sorted(d[:12] for d in digests['checked'])} vs "
        f"{sorted(d[:12] for d in digests['unchecked'])}; the check alone "
        f"{statistics.median(alone) * 1e3:.2f} ms",
        flush=True,
    )
    jax.distributed.shutdown()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--batches", type=int, default=50)
    ap.add_argument("--child", nargs=2, type=int, help=argparse.SUPPRESS)  # port, process id
    args = ap.parse_args()
    if args.child:
        child(*args.child, args.rounds, args.batches)
        return
    if not FILE.exists():
        np.random.default_rng(0).integers(0, 50_000, 4 * 2**20, dtype=np.uint32).tofile(FILE)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, __file__, "--rounds", str(args.rounds), "--batches", str(args.batches)]
    procs = [
        subprocess.Popen([*cmd, "--child", str(port), str(pid)], env=os.environ) for pid in range(2)
    ]
    codes = [p.wait(timeout=600) for p in procs]
    if codes != [0, 0]:
        sys.exit(f"a process failed: exit codes {codes}")


if __name__ == "__main__":
    main()
