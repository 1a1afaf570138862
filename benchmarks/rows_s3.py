"""Padded rows (.npy tokens + mask) on S3 (moto behind a latency proxy): windows vs rows.

    PYTHONPATH=src python benchmarks/rows_s3.py [--rows 16384] [--width 1025] [--steps 512]
        [--batch 32] [--window-rows 2048] [--latency-ms 50] [--rounds 3] [--in-flight 64]
        [--root DIR]

A token matrix (uint16, ``--rows`` x ``--width``, rows of 2 to width tokens, so no
row is empty: replacing one costs a round trip, see docs/rows.md) and its
mask (uint8) are written once under ``--root`` (seeded) and uploaded to a moto
server started for the run, reached through a ``LatencyProxy`` of
``--latency-ms`` in a child process. Sides, all ``PaddedRows(context=width-1)``
through the ``Loader`` (prefetch 8), B=``--batch``:

``local-window``  the local files, ``shuffle="window"`` (the reference).
``s3-window``     the objects, ``shuffle="window"``: each window is one ranged GET
                  per file (cut into 8 MiB pieces), the next window read ahead.
``s3-rows``       the objects, ``shuffle="full"``: one ranged GET per row and file
                  (a batch's GETs all in flight at once), no read-ahead.
``download``      what a user does without range reads: GET both objects whole
                  into local files, then the local reader (windowed); its time
                  to first batch includes the download.

Windowed sides and ``download`` share a plan (same digest); ``s3-rows`` is
checked against the local files with ``shuffle="full"``. Each side first gets a
measurement pass (fresh source, SHA-256 of every batch); then timed trials
alternate sides; medians (min-max).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import sys
import tempfile
import time
from typing import Any

import numpy as np
from _out import out as _out

from headrace.bench._s3_serve import bench_s3
from headrace.formats import PaddedRows, write_row_file
from headrace.io import ObjectStore
from headrace.pipeline import Loader
from headrace.testing import update_digest

URL = "s3://headrace-bench/rows"
MiB = 1 << 20


def write_files(args: argparse.Namespace) -> list[str]:
    os.makedirs(args.root, exist_ok=True)
    tag = f"{args.rows}x{args.width}-s{args.seed}-dense"
    tok, mask = (os.path.join(args.root, f"{n}-{tag}.npy") for n in ("tok", "mask"))
    if not (os.path.exists(tok) and os.path.exists(mask)):
        rng = np.random.default_rng(args.seed)
        t = rng.integers(1, 50_000, (args.rows, args.width)).astype(np.uint16)
        lengths = rng.integers(2, args.width + 1, args.rows)
        t[np.arange(args.width)[None, :] >= lengths[:, None]] = 0
        write_row_file(tok, t)
        write_row_file(mask, (t != 0).astype(np.uint8))
    return [tok, mask]


def source(args: argparse.Namespace, side: str, ctx: dict[str, Any]) -> PaddedRows:
    tok, mask = (os.path.basename(p) for p in ctx["paths"])
    kw: dict[str, Any] = {"context": args.width - 1}
    window = {"shuffle": "window", "window_rows": args.window_rows}
    if side == "local-window":
        return PaddedRows(*ctx["paths"], **kw, **window)
    if side == "local-full":
        return PaddedRows(*ctx["paths"], **kw, shuffle="full")
    remote = {"store_options": ctx["store"], "in_flight": args.in_flight}
    if side == "s3-window":
        return PaddedRows(f"{URL}/{tok}", f"{URL}/{mask}", **kw, **window, **remote)
    if side == "s3-rows":
        return PaddedRows(f"{URL}/{tok}", f"{URL}/{mask}", **kw, shuffle="full", **remote)
    # download: both objects whole, to local files, then the local reader
    with ObjectStore(URL, **ctx["store"]) as store:
        local = []
        for name in (tok, mask):
            path = os.path.join(ctx["tmp"], name)
            with open(path, "wb") as f:
                f.write(store.get(name))
            local.append(path)
    return PaddedRows(*local, **kw, **window)


def run(args: argparse.Namespace, side: str, ctx: dict[str, Any], digest: bool) -> dict[str, Any]:
    steps = args.steps_rows if side in ("s3-rows", "local-full") else args.steps
    t0 = time.perf_counter()
    src = source(args, side, ctx)
    # The source's stats count the GETs that opened its files too: report the reads only.
    opened = src.object_stats
    h = hashlib.sha256()
    first = 0.0
    with Loader(src, batch_size=args.batch, seed=0, steps=steps) as loader:
        t1 = time.perf_counter()
        for n, batch in enumerate(loader):
            if n == 0:
                first = time.perf_counter() - t0  # opening (and any download) included
            if digest:
                update_digest(h, batch)
        t2 = time.perf_counter()
    stats = src.object_stats
    src.close()
    return {
        "first_s": first,
        "bps": steps / (t2 - t1),
        "requests": 0 if stats is None else stats.requests - (opened.requests if opened else 0),
        "fetched": 0 if stats is None else stats.bytes - (opened.bytes if opened else 0),
        "digest": h.hexdigest() if digest else None,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=16_384)
    ap.add_argument("--width", type=int, default=1025)
    ap.add_argument("--steps", type=int, default=512, help="steps of the windowed sides")
    ap.add_argument("--steps-rows", type=int, default=24, help="steps of the per-row side")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--window-rows", type=int, default=2048)
    ap.add_argument("--latency-ms", type=float, default=50)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--in-flight", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--root", default=os.path.expanduser("~/.cache/headrace/bench-s3rows"))
    args = ap.parse_args()
    paths = write_files(args)
    size = sum(os.path.getsize(p) for p in paths)
    _out(
        f"{args.rows} x {args.width} uint16 tokens + uint8 mask ({size / MiB:.1f} MiB), "
        f"B={args.batch}, windows of {args.window_rows} rows; {args.steps} steps windowed, "
        f"{args.steps_rows} per-row; proxy {args.latency_ms:g} ms, in_flight {args.in_flight}"
    )
    sides = ["local-window", "s3-window", "download", "s3-rows"]
    with (
        tempfile.TemporaryDirectory() as tmp,
        bench_s3(URL, paths, latency_ms=args.latency_ms or None) as store,
    ):
        ctx = {"store": store, "paths": paths, "tmp": tmp}
        first = {s: run(args, s, ctx, digest=True) for s in [*sides, "local-full"]}
        windowed = {first[s]["digest"] for s in ("local-window", "s3-window", "download")}
        if len(windowed) != 1 or first["s3-rows"]["digest"] != first["local-full"]["digest"]:
            _out(f"DIGESTS DIFFER: { {s: r['digest'][:12] for s, r in first.items()} }")
            return 1
        trials: dict[str, list[dict[str, Any]]] = {s: [] for s in sides}
        for _ in range(args.rounds):
            for s in sides:
                trials[s].append(run(args, s, ctx, digest=False))
    _out()
    _out(f"timed trials ({args.rounds} rounds, alternating; medians (min-max)):")
    _out("| side | batches/s | 1st batch s (open incl.) | GETs | MiB fetched | sha256 |")
    _out("|---|---|---|---|---|---|")
    for s, rs in trials.items():
        bps = [r["bps"] for r in rs]
        f = first[s]
        _out(
            f"| {s} | {statistics.median(bps):,.1f} ({min(bps):,.1f}-{max(bps):,.1f}) | "
            f"{statistics.median(r['first_s'] for r in rs):.3f} | "
            + (f"{f['requests']} | {f['fetched'] / MiB:.1f} | " if f["requests"] else "- | - | ")
            + f"{f['digest'][:12]} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
