"""Leak probe: N create/iterate-a-few/close cycles per source kind and exit path.

PYTHONPATH=src python audit/leaks.py [--cycles 200] [--kinds tokens,rows,...] [--modes ...]
Prints one line per (kind, prefetch, mode): ok, or LEAK with what grew.
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

from headrace.pipeline import Loader, Mixture  # noqa: E402


def factories(data: dict, s3: dict | None) -> dict:
    from headrace.formats import FileSource, PaddedRows, PairRows, TableSource, TokenSource

    f = {
        "tokens": lambda: TokenSource(
            data["tokens"], dtype="uint16", context=64, window_bytes=1 << 20, block_bytes=64 << 10
        ),
        "tokens_pread": lambda: TokenSource(
            data["tokens"], dtype="uint16", context=64, window_bytes=1 << 20,
            block_bytes=64 << 10, reads="pread",
        ),
        "rows": lambda: PaddedRows(*data["rows"], context=64),
        "rows_pread": lambda: PaddedRows(*data["rows"], context=64, reader="pread"),
        "rows_window": lambda: PaddedRows(*data["rows"], context=64, shuffle="window"),
        "pairs": lambda: PairRows(data["pairs"]),
        "table": lambda: TableSource(data["table"], columns=["input_ids"], width=40),
        "files": lambda: FileSource(data["npy"], format="npy", samples_per_file=2),
        "mixture": lambda: Mixture(
            {
                "a": TokenSource(data["tokens"], dtype="uint16", context=64),
                "b": TokenSource(data["tokens2"], dtype="uint16", context=64),
            },
            [0.5, 0.5],
            batch_size=8,
        ),
    }
    if s3 is not None:
        opts = s3["options"]
        f["s3_files"] = lambda: FileSource(
            s3["files"], format="npy", samples_per_file=2, store_options=opts
        )
        f["s3_tokens"] = lambda: TokenSource(
            s3["tokens"], dtype="uint16", context=64, store_options=opts,
            window_bytes=1 << 20, block_bytes=64 << 10,
        )
        f["s3_rows"] = lambda: PaddedRows(s3["rows"], context=64, store_options=opts)
        f["s3_table"] = lambda: TableSource(
            s3["table"], columns=["input_ids"], width=40, store_options=opts
        )
    return f


class Boom(Exception):
    pass


def cycle(make, mode: str, prefetch: int, i: int) -> None:
    src = make()
    if mode == "close":
        with Loader(src, batch_size=8, seed=i, prefetch=prefetch) as ld:
            for n, _ in enumerate(ld):
                if n == 2:
                    break
    elif mode == "break":  # no close(): the loader and source are dropped
        ld = Loader(src, batch_size=8, seed=i, prefetch=prefetch)
        for n, _ in enumerate(ld):
            if n == 2:
                break
    elif mode == "raise":  # consumer error, no close()
        ld = Loader(src, batch_size=8, seed=i, prefetch=prefetch)
        try:
            for n, _ in enumerate(ld):
                if n == 2:
                    raise Boom
        except Boom:
            pass
    elif mode == "gc":  # an iterator left suspended, then everything dropped
        ld = Loader(src, batch_size=8, seed=i, prefetch=prefetch)
        it = iter(ld)
        next(it)
        next(it)
        del it, ld
    elif mode == "kbint":  # SIGINT to self mid-iteration, then close() in finally
        ld = Loader(src, batch_size=8, seed=i, prefetch=prefetch)
        delay = random.uniform(0.0005, 0.01)
        t = threading.Timer(delay, os.kill, (os.getpid(), signal.SIGINT))
        try:
            t.start()
            try:
                for n, _ in enumerate(ld):
                    if n > 10_000:
                        break
            finally:
                t.join()
        except KeyboardInterrupt:
            pass
        try:
            ld.close()
        except KeyboardInterrupt:
            pass
    elif mode == "kbint_noclose":
        ld = Loader(src, batch_size=8, seed=i, prefetch=prefetch)
        delay = random.uniform(0.0005, 0.01)
        t = threading.Timer(delay, os.kill, (os.getpid(), signal.SIGINT))
        try:
            t.start()
            try:
                for n, _ in enumerate(ld):
                    if n > 10_000:
                        break
            finally:
                t.join()
        except KeyboardInterrupt:
            pass
    else:
        raise SystemExit(f"unknown mode {mode}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cycles", type=int, default=200)
    ap.add_argument("--kinds", default="")
    ap.add_argument("--modes", default="close,break,raise,gc,kbint")
    ap.add_argument("--prefetch", default="0,8")
    ap.add_argument("--s3", action="store_true")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="hr-audit-"))
    data = make_data(root)
    s3 = None
    server = None
    if args.s3:
        from s3setup import start

        server, s3 = start(root)
    fac = factories(data, s3)
    prewarm_pools()
    kinds = args.kinds.split(",") if args.kinds else list(fac)
    failures = 0
    try:
        for kind in kinds:
            for prefetch in (int(p) for p in args.prefetch.split(",")):
                for mode in args.modes.split(","):
                    for w in range(3):  # warm up process-wide pools and caches
                        cycle(fac[kind], mode, prefetch, w)
                    a = snapshot()
                    t0 = time.time()
                    for i in range(args.cycles):
                        cycle(fac[kind], mode, prefetch, i)
                    b = snapshot()
                    label = f"{kind} prefetch={prefetch} {mode} x{args.cycles} ({time.time() - t0:.1f}s)"
                    failures += bool(diff(a, b, label))
    finally:
        if server is not None:
            server.close()
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
