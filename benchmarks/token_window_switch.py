"""Window switches on cold storage: reading the next window ahead vs on demand.

    python benchmarks/token_window_switch.py --root DIR [--gib 0.5 --window-mib 64
        --compute-ms 1.0 --steps 2048 --trials 3 --json OUT]

Writes (once) ``DIR/switch-tokens.bin``, a uint32 token file, then runs
trials alternating ``ahead, on-demand, ahead, ...``. Before every trial the
file's pages are dropped from the page cache (``posix_fadvise(DONTNEED)``), so
each trial reads from the device. Each trial is a ``Loader`` (async, 8
batches ahead) of B=32 windows of L=1024 tokens, with ``--compute-ms`` of
simulated computation per step; the time a step waits inside ``next()`` is
the loader's stall (digesting is kept out of the timing). Reports per side
the median total stall, the largest single stall, accelerator utilisation
(compute / wall), and the SHA-256 of every batch (both sides must agree).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from _cold import evict
from headrace.formats import TokenSource
from headrace.pipeline import Loader

L, B = 1024, 32


def ensure_file(root: Path, gib: float) -> Path:
    path = root / f"switch-tokens-{gib:g}gib.bin"
    size = int(gib * (1 << 30)) // 4 * 4
    if path.exists() and path.stat().st_size == size:
        return path
    rng = np.random.default_rng(0)
    with path.open("wb") as fh:
        left = size // 4
        while left:
            n = min(left, 4 << 20)
            fh.write(rng.integers(0, 50_000, n, dtype=np.uint32).tobytes())
            left -= n
        fh.flush()
        os.fsync(fh.fileno())
    return path


def trial(path: Path, ahead: bool, window_mib: int, compute_s: float, steps: int) -> dict:
    src = TokenSource(
        path, dtype="uint32", context=L, window_bytes=window_mib << 20, read_ahead=ahead
    )
    h = hashlib.sha256()
    stalls = []
    digesting = 0.0  # kept out of the utilisation: the check is not the workload
    with Loader(src, batch_size=B, prefetch=8, steps=steps) as loader:
        it = iter(loader)
        t0 = time.perf_counter()
        for _ in range(steps):
            a = time.perf_counter()
            batch = next(it)
            b = time.perf_counter()
            stalls.append(b - a)
            h.update(batch["x"].tobytes())
            h.update(batch["y"][:, -1].tobytes())
            end = time.perf_counter() + compute_s
            digesting += end - compute_s - b
            while time.perf_counter() < end:  # busy, as an accelerator's host thread
                pass
        wall = time.perf_counter() - t0
    # The first step reads the first window on either side: leave it out, as DLIO does.
    return {
        "stall_s": sum(stalls[1:]),
        "max_stall_ms": max(stalls[1:]) * 1e3,
        "au": compute_s * (steps - 1) / (wall - stalls[0] - digesting),
        "windows": src.stats.windows_opened,
        "digest": h.hexdigest(),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", required=True, type=Path)
    ap.add_argument("--gib", type=float, default=0.5)
    ap.add_argument("--window-mib", type=int, default=64)
    ap.add_argument("--compute-ms", type=float, default=1.0)
    ap.add_argument("--steps", type=int, default=2048)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    args.root.mkdir(parents=True, exist_ok=True)
    path = ensure_file(args.root, args.gib)
    sides = {"ahead": True, "on-demand": False}
    runs: dict[str, list[dict]] = {s: [] for s in sides}
    for t in range(args.trials):
        for name in sides if t % 2 == 0 else reversed(list(sides)):
            evict(str(path))
            runs[name].append(
                trial(path, sides[name], args.window_mib, args.compute_ms / 1e3, args.steps)
            )
    digests = {s: {r["digest"] for r in rs} for s, rs in runs.items()}
    same = len(set().union(*digests.values())) == 1
    report = {
        "path": str(path),
        "window_mib": args.window_mib,
        "compute_ms": args.compute_ms,
        "steps": args.steps,
        "sides": {
            s: {
                "stall_s_median": statistics.median(r["stall_s"] for r in rs),
                "max_stall_ms_median": statistics.median(r["max_stall_ms"] for r in rs),
                "au_median": statistics.median(r["au"] for r in rs),
                "windows": rs[0]["windows"],
                "digest": rs[0]["digest"],
                "trials": rs,
            }
            for s, rs in runs.items()
        },
        "digests_equal": same,
    }
    print(f"{'side':10s} {'stall s':>8s} {'max stall ms':>13s} {'AU':>6s} {'windows':>8s}  sha256")
    for s, r in report["sides"].items():
        print(
            f"{s:10s} {r['stall_s_median']:8.3f} {r['max_stall_ms_median']:13.1f} "
            f"{r['au_median']:6.3f} {r['windows']:8d}  {r['digest'][:12]}"
        )
    print("digests equal" if same else "DIGESTS DIFFER")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
