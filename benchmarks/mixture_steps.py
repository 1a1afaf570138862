"""A Mixture's own work a step, over 100 and 1,000 token sources: two source trees, A/B/A/B.

    PYTHONPATH=src python benchmarks/mixture_steps.py --src /work/main/src --src src
        [--sources 100,1000] [--chunks 12] [--trials 3]

Each side runs in a fresh process with its ``--src`` first on the path, over S
single-file token sources of 4,096 uint16 tokens each (written once under
``--root``, page cached), mixed with equal weights, global batch 8. It does what
a Loader's producer does a chunk of 32 steps (``prefetch``, then ``read``), in
this thread, and reports milliseconds a step (median of its chunks after the
first two), the plan's ``locate`` alone a chunk, and the SHA-256 of the batches,
which must agree between the sides. The sides' limit on open files is raised
(up to the hard limit) so that neither sheds files.

Prediction, written before the first run: the apportionment tree
(``MixturePlan.cumulative``) was a Python loop over its ``S - 1`` nodes, 11 ms a
call at 1,000 sources, two calls a chunk (0.7 ms a step of 7.5); a level at a
time it is ~10 array operations of ``(32, <=S)`` each, under 1 ms a call. So at
1,000 sources a step should go from ~7.5 to ~6.8 ms (~10%), at 100 sources from
~1.8 to ~1.75 ms (within the spread): the rest is each source met planning its
own windows (about 230 of 1,000 met a chunk), which is not the mixture's.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

B = 8
CHUNK = 32  # steps a Loader plans at once


def build(root: Path, n: int) -> Path:
    d = root / f"mixture-{n}"
    if (d / ".done").exists():
        return d
    d.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(n)
    for i in range(n):
        rng.integers(0, 50_000, 4096, dtype=np.uint16).tofile(d / f"shard-{i:06d}.bin")
    (d / ".done").write_text("")
    return d


def side(d: Path, chunks: int) -> dict[str, Any]:
    from headrace.formats import TokenSource
    from headrace.pipeline import Mixture
    from headrace.testing import update_digest

    srcs = [TokenSource(f, context=64, dtype="uint16") for f in sorted(d.glob("*.bin"))]
    mix = Mixture(srcs, [1.0] * len(srcs), batch_size=B)
    h = hashlib.sha256()
    step_ms, locate_ms = [], []
    for c in range(chunks):
        s = np.arange(c * CHUNK * B, (c + 1) * CHUNK * B, dtype=np.int64)
        t0 = time.perf_counter()
        mix.plan.locate(0, s)
        t1 = time.perf_counter()
        mix.prefetch(0, s)
        batch = mix.read(0, s)
        t2 = time.perf_counter()
        update_digest(h, batch)
        if c >= 2:  # the first chunks open every window
            locate_ms.append((t1 - t0) * 1e3)
            step_ms.append((t2 - t1) * 1e3 / CHUNK)
    mix.close()
    return {
        "step_ms": statistics.median(step_ms),
        "locate_ms": statistics.median(locate_ms),
        "sha256": h.hexdigest()[:16],
        # files opened again after being closed for the bound, and those closed by others
        "reopened": sum(getattr(s.stats, "files_reopened", 0) for s in srcs),
        "shed": sum(getattr(s.stats, "files_shed", 0) for s in srcs),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", action="append", default=[])
    ap.add_argument("--sources", default="100,1000")
    ap.add_argument("--chunks", type=int, default=12)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--root", default="/tmp/headrace-mixture-steps")
    ap.add_argument("--side")
    args = ap.parse_args()
    if args.side:
        print(json.dumps(side(Path(args.side), args.chunks)))
        return
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    srcs = args.src or [str(Path(__file__).resolve().parent.parent / "src")]
    for n in (int(v) for v in args.sources.split(",")):
        d = build(Path(args.root), n)
        runs: dict[str, list[dict[str, Any]]] = {s: [] for s in srcs}
        for _ in range(args.trials):
            for s in srcs:  # A, B, A, B, ...
                cmd = [sys.executable, __file__, "--side", str(d), "--chunks", str(args.chunks)]
                env = dict(os.environ, PYTHONPATH=s)
                got = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
                runs[s].append(json.loads(got.stdout.splitlines()[-1]))
        for s, rs in runs.items():
            step = statistics.median(r["step_ms"] for r in rs)
            loc = statistics.median(r["locate_ms"] for r in rs)
            digests = sorted({r["sha256"] for r in rs})
            print(
                f"{n:5d} sources  {s:28s}  {step:6.2f} ms a step  locate {loc:6.2f} ms a chunk"
                f"  trials {[round(r['step_ms'], 2) for r in rs]}  {digests}",
                flush=True,
            )


if __name__ == "__main__":
    main()
