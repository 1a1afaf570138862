"""Leak probe for the torch adapter with worker processes.

PYTHONPATH=src python audit/torch_leaks.py [--cycles 30] [--modes close,break,raise,gc,kbint]
  [--loader headrace|stock] [--workers 2]
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import diff, make_data, prewarm_pools, snapshot  # noqa: E402


class Boom(Exception):
    pass


def make_loader(kind: str, data: dict, workers: int, seed: int):
    from torch.utils.data import DataLoader

    from headrace.formats import TokenSource
    from headrace.torch import HeadraceDataLoader, TorchDataset

    src = TokenSource(data["tokens"], dtype="uint16", context=64)
    ds = TorchDataset(src, batch_size=8, seed=seed)
    if kind == "headrace":
        return HeadraceDataLoader(ds, num_workers=workers)
    return DataLoader(ds, batch_size=None, num_workers=workers, multiprocessing_context="forkserver")


def cycle(kind: str, data: dict, workers: int, mode: str, i: int) -> None:
    ld = make_loader(kind, data, workers, i)
    if mode == "close":
        if hasattr(ld, "close"):
            with ld:
                for n, _ in enumerate(ld):
                    if n == 2:
                        break
        else:
            it = iter(ld)
            for n, _ in enumerate(it):
                if n == 2:
                    break
            it._shutdown_workers()
    elif mode == "break":
        for n, _ in enumerate(ld):
            if n == 2:
                break
    elif mode == "raise":
        try:
            for n, _ in enumerate(ld):
                if n == 2:
                    raise Boom
        except Boom:
            pass
    elif mode == "gc":
        it = iter(ld)
        next(it)
        next(it)
        del it, ld
    elif mode == "kbint":
        t = threading.Timer(random.uniform(0.05, 0.6), os.kill, (os.getpid(), signal.SIGINT))
        try:
            t.start()
            try:
                for n, _ in enumerate(ld):
                    if n > 100_000:
                        break
            finally:
                t.join()
        except KeyboardInterrupt:
            pass


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cycles", type=int, default=30)
    ap.add_argument("--modes", default="close,break,raise,gc,kbint")
    ap.add_argument("--loader", default="headrace")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="hr-audit-torch-"))
    data = make_data(root)
    prewarm_pools()
    bad = 0
    for mode in args.modes.split(","):
        for w in range(2):
            cycle(args.loader, data, args.workers, mode, w)
        a = snapshot()
        t0 = time.time()
        for i in range(args.cycles):
            cycle(args.loader, data, args.workers, mode, i)
        b = snapshot()
        label = f"{args.loader} workers={args.workers} {mode} x{args.cycles} ({time.time() - t0:.0f}s)"
        bad += bool(diff(a, b, label))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
