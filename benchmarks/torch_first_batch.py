"""HeadraceDataLoader with workers: how soon the first batch comes after ``iter()``.

Run: PYTHONPATH=src python benchmarks/torch_first_batch.py [--rounds 4] [--setup-s 2]

A training script builds its loader, then its model (``--setup-s`` of sleep
stands in for that), then iterates. Each trial is a fresh Python process (the
fork server lives as long as the process that started it), alternating:

  at-iter       the fork server started by the first ``iter()``, importing torch
                only (what HeadraceDataLoader did before)
  at-build      the fork server started when the loader is built, importing torch
                and headrace's readers (what it does now)

Printed per side: seconds from ``iter()`` to the first batch (median, min-max);
then, in the same process, from building a second loader to its first batch (the
fork server already running: what later loaders of a run pay); and the SHA-256 of
the first 64 batches (the same on both sides).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import time
from pathlib import Path

import numpy as np
from _children import alternate
from _out import out

FILE = Path("/tmp/headrace-bench-first-batch.u16")


def child(side: str, setup_s: float) -> None:
    import torch  # noqa: F401  (a training script has it imported already)

    from headrace import torch as ht
    from headrace.formats import TokenSource
    from headrace.torch import _dataloader

    if side == "at-iter":
        # The code before: preload torch in a server that the first iter() starts.
        def preload_only(ctx):  # type: ignore[no-untyped-def]
            if ctx.get_start_method() == "forkserver":
                ctx.set_forkserver_preload(["__main__", "torch"])

        _dataloader._start_fork_server = preload_only
    ds = ht.TorchDataset(
        TokenSource(FILE, dtype="uint16", context=1024), batch_size=32, seed=1, steps=64
    )
    dl = ht.HeadraceDataLoader(ds, num_workers=2)
    time.sleep(setup_s)  # the model is built
    t0 = time.perf_counter()
    h = hashlib.sha256()
    first = None
    for b in dl:
        if first is None:
            first = time.perf_counter() - t0
        h.update(b["x"].numpy().tobytes())
    dl.close()
    # A second loader in the same process, iterated at once: the server is running. From
    # step 0: a loader over ds goes on from its step, and the pass above took all 64.
    ds.load_state_dict(ds.state_at(0))
    t0 = time.perf_counter()
    again = ht.HeadraceDataLoader(ds, num_workers=2)
    next(iter(again))
    again_s = time.perf_counter() - t0
    again.close()
    print(json.dumps({"first_s": first, "again_s": again_s, "digest": h.hexdigest()[:16]}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--setup-s", type=float, default=2.0)
    ap.add_argument("--child", choices=["at-iter", "at-build"])
    a = ap.parse_args()
    if a.child:
        child(a.child, a.setup_s)
        return
    if not FILE.exists():
        np.arange(64 << 20, dtype=np.uint16).tofile(FILE)  # 128 MiB
    sides = ["at-iter", "at-build"]
    got = alternate(__file__, sides, a.rounds, ["--setup-s", str(a.setup_s)])
    for s in sides:
        firsts = [float(g["first_s"]) for g in got[s]]
        agains = [float(g["again_s"]) for g in got[s]]
        digests = sorted({str(g["digest"]) for g in got[s]})
        out(
            f"{s:9} first batch {statistics.median(firsts):.3f} s "
            f"({min(firsts):.3f}-{max(firsts):.3f}); a second loader, built and iterated at "
            f"once: {statistics.median(agains):.3f} s ({min(agains):.3f}-{max(agains):.3f}); "
            f"digests {digests}"
        )


if __name__ == "__main__":
    main()
