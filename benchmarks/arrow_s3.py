"""A ``save_to_disk`` dataset (Arrow IPC shards) on S3: read in place vs downloaded first.

    PYTHONPATH=src python benchmarks/arrow_s3.py [--shards 8] [--rows 4096] [--batch-rows 1000]
        [--steps 1024] [--batch 32] [--width 1024] [--latency-ms 50] [--rounds 3]
        [--root DIR]

``--shards`` Arrow IPC streams as ``datasets.save_to_disk`` lays them out
(``data-0000i-of-0000N.arrow``, record batches of ``--batch-rows`` rows, a
``state.json`` naming them; ``input_ids``: list<int32> of 64-1024 tokens,
``label``: int64), written once under ``--root`` (seeded) and uploaded to a
moto server started for the run, reached through a ``LatencyProxy`` of
``--latency-ms``. Every side follows one plan (``TableSource``'s windowed
shuffle, windows of one shard's rows, seed 0, B=``--batch``, ids padded to
``--width``; with ``--packed``, ``table_token_files`` + ``TokenSource``: samples
of ``--width`` + 1 tokens of the rows' concatenation), through the ``Loader``
(prefetch 8):

``local``        ``TableSource(folder)``: the page-cached files (the reference).
``s3-headrace``  ``TableSource("s3://.../prefix")``: headers walked at open, record
                 batches fetched by ranged GETs when a window needs them, read ahead.
``s3-download``  what a user does without it (``datasets.load_from_disk`` on an
                 ``s3://`` path copies the folder first): every object fetched by
                 bare concurrent GETs (``ObjectStore.get_many``, 64 in flight: the
                 fastest copy there is), written to a temporary folder, then read as
                 ``local``. Its open time includes the copy.

Each side first gets a measurement pass (SHA-256 of every batch); the script
refuses to report unless all digests are equal. Then timed trials alternate
sides, fresh sources each; medians (min-max).

Prediction (written before the first run; 8 x 4096 rows, ~70 MiB, 50 ms):
the walk costs a GET per record batch, one shard's 5 after another, all
shards side by side: ~0.3 s at open; the first batch then needs its window's
5 record batches (~9 MiB): ~0.2 s more, so ~0.5 s to the first batch against
~1-1.5 s for the copy (70 MiB at moto's ~100 MB/s, plus round trips): 2-3x
sooner. Over the whole epoch both move the same bytes: about equal end to end.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from _out import out as _out
from tables_s3 import token_table

from headrace.bench._s3_serve import bench_s3
from headrace.formats import TableSource, TokenSource, table_token_files
from headrace.io import ObjectStore
from headrace.pipeline import Loader
from headrace.testing import update_digest

URL = "s3://headrace-bench/saved"
MiB = 1 << 20


def write_folder(args: argparse.Namespace) -> tuple[str, list[str]]:
    """The save_to_disk-like folder (written once) and its files' paths."""
    folder = os.path.join(args.root, f"saved-{args.shards}-{args.rows}-{args.batch_rows}")
    names = [f"data-{i:05d}-of-{args.shards:05d}.arrow" for i in range(args.shards)]
    if not os.path.exists(os.path.join(folder, "state.json")):
        os.makedirs(folder, exist_ok=True)
        for i, name in enumerate(names):
            table = token_table(args.seed, i, args.rows)  # tables_s3's rows
            with pa.ipc.new_stream(os.path.join(folder, name), table.schema) as w:
                w.write_table(table, max_chunksize=args.batch_rows)
        state = {"_data_files": [{"filename": n} for n in names], "_fingerprint": "bench"}
        with open(os.path.join(folder, "state.json"), "w") as f:
            json.dump(state, f)
    return folder, [os.path.join(folder, n) for n in [*names, "state.json"]]


def _kw(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "columns": ["input_ids", "label"],
        "width": args.width,
        "window_rows": args.rows,
        "shuffle": "window",
    }


def download(store_options: dict[str, Any], names: list[str], into: str) -> None:
    with ObjectStore(URL, **store_options) as store:
        bodies = store.get_many(names, max_in_flight=64)
    for name, body in zip(names, bodies, strict=True):
        with open(os.path.join(into, name), "wb") as f:
            f.write(body)


def source(args: argparse.Namespace, where: str, store: dict[str, Any] | None) -> Any:
    """The rows padded (``TableSource``), or with ``--packed`` the column as a token
    stream (``table_token_files`` + ``TokenSource``), at ``where``."""
    opts: dict[str, Any] = {} if store is None else {"store_options": store}
    if args.packed:
        files = table_token_files(where, "input_ids", **opts)
        return TokenSource(files, context=args.width, positions="documents", **opts)
    return TableSource(where, **_kw(args), **opts)


def run(side: str, args: argparse.Namespace, ctx: dict[str, Any], digest: bool) -> dict[str, Any]:
    t0 = time.perf_counter()
    tmp = None
    if side == "local":
        src = source(args, ctx["folder"], None)
    elif side == "s3-headrace":
        src = source(args, URL, ctx["store"])
    else:
        tmp = tempfile.mkdtemp(prefix="arrow-s3-", dir=args.root)
        download(ctx["store"], ctx["names"], tmp)
        src = source(args, tmp, None)
    t1 = time.perf_counter()
    h = hashlib.sha256()
    first, n = 0.0, 0
    with Loader(src, batch_size=args.batch, seed=0, steps=args.steps, prefetch=8) as loader:
        it: Iterator[dict[str, Any]] = iter(loader)
        for batch in it:
            if n == 0:
                first = time.perf_counter() - t0
            if digest:
                update_digest(h, batch)
            n += 1
    t2 = time.perf_counter()
    stats = src.object_stats
    src.close()
    if tmp is not None:
        shutil.rmtree(tmp)
    return {
        "open_s": t1 - t0,
        "first_s": first,
        "total_s": t2 - t0,
        "bps": n / (t2 - t1),
        "fetched": 0 if stats is None else stats.bytes,
        "requests": 0 if stats is None else stats.requests,
        "digest": h.hexdigest() if digest else None,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--batch-rows", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--latency-ms", type=float, default=50)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--packed",
        action="store_true",
        help="read input_ids as one token stream (table_token_files), samples of --width",
    )
    ap.add_argument("--root", default=os.path.expanduser("~/.cache/headrace/bench-s3arrow"))
    args = ap.parse_args()
    folder, paths = write_folder(args)
    size = sum(os.path.getsize(p) for p in paths)
    _out(
        f"{args.shards} Arrow IPC shards x {args.rows} rows (record batches of "
        f"{args.batch_rows}), {size / MiB:.1f} MiB; B={args.batch}, width {args.width}, "
        f"{args.steps} steps ({args.steps * args.batch / (args.shards * args.rows):.2f} "
        f"epochs), proxy {args.latency_ms:g} ms"
    )
    sides = ["local", "s3-headrace", "s3-download"]
    with bench_s3(URL, paths, latency_ms=args.latency_ms or None) as store:
        ctx = {"store": store, "folder": folder, "names": [os.path.basename(p) for p in paths]}
        first = {s: run(s, args, ctx, digest=True) for s in sides}
        digests = {s: r["digest"] for s, r in first.items()}
        if len(set(digests.values())) != 1:
            _out(f"DIGESTS DIFFER: {digests}; refusing to report speed")
            return 1
        trials: dict[str, list[dict[str, Any]]] = {s: [] for s in sides}
        for _ in range(args.rounds):
            for s in sides:
                trials[s].append(run(s, args, ctx, digest=False))

    def med(rs: list[dict[str, Any]], key: str, fmt: str = "{:.3f}") -> str:
        v = [r[key] for r in rs]
        return f"{fmt.format(statistics.median(v))} ({fmt.format(min(v))}-{fmt.format(max(v))})"

    _out(f"\ntimed trials ({args.rounds} rounds, alternating; medians (min-max)):")
    _out("| side | open s | 1st batch s | whole run s | batches/s after open | MiB fetched "
         "| GETs | sha256 |")  # fmt: skip
    _out("|---|---|---|---|---|---|---|---|")
    for s, rs in trials.items():
        fetched = first[s]["fetched"]
        _out(
            f"| {s} | {med(rs, 'open_s')} | {med(rs, 'first_s')} | {med(rs, 'total_s')} | "
            f"{med(rs, 'bps', '{:,.0f}')} | "
            + (f"{fetched / MiB:.1f} | {first[s]['requests']} | " if fetched else "- | - | ")
            + f"{first[s]['digest'][:12]} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
