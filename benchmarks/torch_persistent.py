"""HeadraceDataLoader(persistent_workers=True): how soon a later ``iter()`` gets its first batch.

Run: PYTHONPATH=src python benchmarks/torch_persistent.py [--rounds 3] [--imports lightning]

An epoch loop calls ``iter()`` once an epoch. Each trial is a fresh Python
process that builds a loader (2 workers), then iterates three times, taking 8
batches each time; it times ``iter()`` to the first batch of each iteration.
Sides, alternating (A/B/A/B), once for a script that imports nothing more and
once for one that imports ``--imports`` at its top (each new worker imports the
main script again, and with it that module):

  fresh        persistent_workers=False: new workers at every iter()
  persistent   persistent_workers=True: the same workers told the new start

Printed per side: the median (min-max) of the 2nd and 3rd iterations' first
batch (the 1st for reference), and the SHA-256 of all 24 batches, which must be
the same on both sides.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np
from _children import alternate, side_figures, spread
from _out import out

FILE = Path("/tmp/headrace-bench-persistent.u16")
if os.environ.get("HEADRACE_BENCH_IMPORT"):  # at the top: each new worker imports it again
    __import__(os.environ["HEADRACE_BENCH_IMPORT"])


def child(side: str) -> None:
    from headrace import torch as ht
    from headrace.formats import TokenSource

    ds = ht.TorchDataset(TokenSource(FILE, dtype="uint16", context=1024), batch_size=32, seed=1)
    dl = ht.HeadraceDataLoader(ds, num_workers=2, persistent_workers=side == "persistent")
    h = hashlib.sha256()
    firsts = []
    for _ in range(3):
        t0 = time.perf_counter()
        for i, b in enumerate(dl):
            if i == 0:
                firsts.append(time.perf_counter() - t0)
            h.update(b["x"].numpy().tobytes())
            if i == 7:
                break
    dl.close()
    print(json.dumps({"firsts": firsts, "digest": h.hexdigest()[:16]}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--imports", default="lightning")
    ap.add_argument("--child", choices=["fresh", "persistent"])
    a = ap.parse_args()
    if a.child:
        child(a.child)
        return
    if not FILE.exists():
        np.arange(64 << 20, dtype=np.uint16).tofile(FILE)  # 128 MiB
    sides = ["fresh", "persistent"]
    for imports in ("", a.imports):
        out(f"imports={imports or '-'}")
        env = {**os.environ, "HEADRACE_BENCH_IMPORT": imports}
        got = alternate(__file__, sides, a.rounds, [], env)
        for s in sides:
            later, digests = side_figures(got[s])
            first = [float(g["firsts"][0]) for g in got[s]]
            out(
                f"imports={imports or '-'} {s:10} 2nd/3rd iter() to first batch "
                f"{spread(later)} s; 1st {statistics.median(first):.3f} s; digests {digests}"
            )


if __name__ == "__main__":
    main()
