"""What bounding a RangeReader's open files costs per read: two source trees A/B/A/B.

    python benchmarks/open_files_ab.py --a /work/main/src --b src [--rounds 6 --reads 2000]

B pins a file while a read of it runs and closes the least recently read past
``max_idle_files`` idle (docs/io.md#errors-and-lifetimes); A kept every file open. Each round
runs a short child process per tree (A, B, then B, A next round), each timing
``--reads`` batches of 32 random rows of 1,025 bytes from page-cached local
files through ``RangeReader(strategy).read_rows``, for ``mmap`` and ``pread``
(engine threads), over 1 file (every read finds its file open: the pin is the
whole difference) and over 300 files read in turn (A holds 300 open, 600
descriptors mapped; B as well under its default bound, a quarter of ``ulimit -n``,
and with ``max_idle_files=64`` reopens every one: the bound's worst case).
Reports the median microseconds per batch per side, B/A, the most descriptors
held, and the SHA-256 of every batch each side read (which must agree).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROWS, WIDTH, BATCH = 2048, 1025, 32
# (strategy, files, B's max_idle_files: None for its default, a quarter of ulimit -n)
CASES = [(s, n, b) for s in ("mmap", "pread") for n, b in ((1, None), (300, None), (300, 64))]

CHILD = """
import hashlib, json, os, statistics, sys, time
import numpy as np
from headrace.io import RangeReader, ReaderConfig

folder, reads, cases, rows, width, batch = json.loads(sys.argv[1])
out = {}
bounded = "max_idle_files" in ReaderConfig.__dataclass_fields__  # A has no bound
for strategy, nfiles, bound in cases:
    paths = [os.path.join(folder, f"{i:03d}.bin") for i in range(nfiles)]
    rng = np.random.default_rng(5)
    plan = [(paths[k % nfiles], rng.integers(0, rows, batch)) for k in range(reads)]
    h, times, most = hashlib.sha256(), [], 0
    extra = {"max_idle_files": bound} if bounded else {}
    with RangeReader(ReaderConfig(strategy=strategy, engine="threads", **extra)) as r:
        for p in paths:  # every file opened (and mapped) once before the clock
            r.read_rows(p, [0], width)
        for p, idx in plan:
            t0 = time.perf_counter()
            got = r.read_rows(p, idx, width)
            times.append(time.perf_counter() - t0)
            h.update(got.tobytes())
        most = len(os.listdir("/proc/self/fd"))
    out[f"{strategy}/{nfiles}/{bound}"] = {
        "us": statistics.median(times) * 1e6, "sha": h.hexdigest(), "fds": most
    }
print(json.dumps(out))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--a", required=True, help="source tree A (the src/ folder)")
    ap.add_argument("--b", required=True, help="source tree B")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--reads", type=int, default=2000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        rng = np.random.default_rng(1)
        for i in range(max(n for _, n, _ in CASES)):
            data = rng.integers(0, 256, ROWS * WIDTH, dtype=np.uint8)
            Path(folder, f"{i:03d}.bin").write_bytes(data.tobytes())
        arg = json.dumps([folder, args.reads, CASES, ROWS, WIDTH, BATCH])
        runs: dict[str, list[dict[str, dict[str, object]]]] = {"A": [], "B": []}
        for r in range(args.rounds):
            for side in ("A", "B") if r % 2 == 0 else ("B", "A"):
                tree = os.path.abspath(getattr(args, side.lower()))
                env = {**os.environ, "PYTHONPATH": tree}
                got = subprocess.run(
                    [sys.executable, "-c", CHILD, arg],
                    env=env,
                    capture_output=True,
                    text=True,
                    check=True,
                )
                runs[side].append(json.loads(got.stdout))
    head = f"{'case (B bound)':<16} {'A us':>8} {'B us':>8} {'B/A':>6}"
    print(f"{head} {'fds A':>6} {'fds B':>6}  sha")
    for strategy, n, bound in CASES:
        key = f"{strategy}/{n}/{bound}"
        med = {s: statistics.median(float(x[key]["us"]) for x in runs[s]) for s in runs}  # type: ignore[arg-type]
        shas = {str(x[key]["sha"]) for s in runs for x in runs[s]}
        fds = {s: max(int(x[key]["fds"]) for x in runs[s]) for s in runs}  # type: ignore[call-overload]
        same = next(iter(shas))[:12] if len(shas) == 1 else f"DIFFER {sorted(shas)}"
        print(
            f"{key:<16} {med['A']:8.1f} {med['B']:8.1f} {med['B'] / med['A']:6.2f} "
            f"{fds['A']:6d} {fds['B']:6d}  {same}"
        )


if __name__ == "__main__":
    main()
