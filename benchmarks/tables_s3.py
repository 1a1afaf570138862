"""A Parquet dataset of token lists on S3 (moto behind a latency proxy): headrace vs pyarrow.

    PYTHONPATH=src python benchmarks/tables_s3.py [--files 8] [--rows 4096] [--group-rows 512]
        [--steps 1024] [--batch 32] [--width 1024] [--latency-ms 50] [--rounds 3]
        [--in-flight 64] [--compute-ms 0] [--root DIR]

``--files`` Parquet files of ``--rows`` rows each (``input_ids``: list<int32> of
64-1024 tokens; ``label``: int64), row groups of ``--group-rows``, generated
once under ``--root`` (seeded) and uploaded to a moto server started for the
run, reached through a ``LatencyProxy`` of ``--latency-ms`` in a child process.
Every side follows one plan, ``TableSource``'s windowed shuffle (windows of
``--rows`` rows, i.e. one file's row groups, seed 0), B=``--batch``, ids padded
to ``--width``:

``local``            ``TableSource(dir)`` (the page-cached files; the reference).
``s3-headrace``      ``TableSource("s3://...", store_options=...)`` through the
                     ``Loader`` (prefetch 8): row groups fetched by parallel
                     ranged GETs, read ahead.
``s3-no-read-ahead`` the same source with its ``prefetch`` hidden and
                     ``prefetch=0``: each batch's missing row groups are fetched
                     (in parallel) when the batch needs them.
``s3-pyarrow``       what a user writes without headrace: ``pyarrow.fs.S3FileSystem``
                     (same endpoint, through the proxy) and ``pq.ParquetFile``,
                     row groups read on demand (``read_row_group``) into an LRU
                     cache of one window, rows gathered with ``Table.take`` and
                     padded with NumPy.

``ceiling`` is the endpoint's own rate for these bytes: every row group's byte
range fetched by bare concurrent GETs (``ObjectStore.get_many``, ``--in-flight``
at once), no decoding, measured between the trials.

Each side first gets a measurement pass (fresh source; SHA-256 of every batch,
bytes and GETs); the script refuses to report unless all digests are equal.
Then timed trials alternate sides, fresh sources each; medians (min-max).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import sys
import time
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from _out import out as _out

from headrace.bench._s3_serve import bench_s3
from headrace.formats import TableSource
from headrace.formats._arrow_numpy import numbers
from headrace.formats._row_plan import RowWindows
from headrace.pipeline import Loader
from headrace.plan import step_samples
from headrace.testing import update_digest

URL = "s3://headrace-bench/tables"
MiB = 1 << 20


def token_table(seed: int, i: int, rows: int) -> pa.Table:
    """File ``i``'s rows: ``input_ids`` list<int32> of 64-1,024 tokens, ``label`` int64."""
    rng = np.random.default_rng([seed, i])
    lengths = rng.integers(64, 1025, rows)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    values = rng.integers(0, 50_000, int(offsets[-1]), dtype=np.int32)
    ids = pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))
    label = np.arange(rows, dtype=np.int64) + i * rows
    return pa.table({"input_ids": ids, "label": label})


def write_files(args: argparse.Namespace) -> list[str]:
    os.makedirs(args.root, exist_ok=True)
    paths = []
    for i in range(args.files):
        path = os.path.join(args.root, f"train-{i:03d}-{args.rows}-{args.group_rows}.parquet")
        paths.append(path)
        if os.path.exists(path):
            continue
        table = token_table(args.seed, i, args.rows)
        pq.write_table(table, path + ".tmp", row_group_size=args.group_rows)
        os.replace(path + ".tmp", path)
    return paths


class _Hidden:
    """A source without ``prefetch``: the loader cannot read ahead."""

    def __init__(self, src: TableSource) -> None:
        self._src = src

    def __getattr__(self, name: str) -> Any:
        if name == "prefetch":
            raise AttributeError(name)
        return getattr(self._src, name)


def _kw(args: argparse.Namespace) -> dict[str, Any]:
    return {"columns": ["input_ids", "label"], "width": args.width, "window_rows": args.rows}


def headrace_side(
    args: argparse.Namespace, where: str, store: dict[str, Any] | None, read_ahead: bool
) -> tuple[Iterator[dict[str, Any]], Any]:
    if store is None:
        src = TableSource(where, **_kw(args))
    else:
        src = TableSource(where, store_options=store, in_flight=args.in_flight, **_kw(args))
    source: Any = src if read_ahead else _Hidden(src)
    loader = Loader(
        source, batch_size=args.batch, seed=0, steps=args.steps, prefetch=8 if read_ahead else 0
    )

    def batches() -> Iterator[dict[str, Any]]:
        with loader:
            yield from loader
        src.close()

    def stats() -> tuple[int, int]:
        s = src.object_stats
        return (0, 0) if s is None else (s.bytes, s.requests)

    return batches(), stats


def pyarrow_side(
    args: argparse.Namespace, store: dict[str, Any], names: list[str]
) -> tuple[Iterator[dict[str, Any]], Any]:
    from pyarrow import fs

    endpoint = str(store["endpoint"])
    s3 = fs.S3FileSystem(
        access_key=store["access_key_id"],
        secret_key=store["secret_access_key"],
        region=store["region"],
        endpoint_override=endpoint.split("://", 1)[1],
        scheme="http",
    )
    bucket_prefix = URL.removeprefix("s3://")
    files = [pq.ParquetFile(s3.open_input_file(f"{bucket_prefix}/{n}")) for n in names]
    groups = [(f, g) for f in files for g in range(f.metadata.num_row_groups)]
    sizes = np.array([f.metadata.row_group(g).num_rows for f, g in groups])
    starts = np.concatenate([[0], np.cumsum(sizes)])
    windows = RowWindows(sizes, args.rows)  # TableSource's plan over the same row groups
    cache: OrderedDict[int, pa.Table] = OrderedDict()
    width = args.width

    def batches() -> Iterator[dict[str, Any]]:
        for t in range(args.steps):
            samples = step_samples(np.array([t]), args.batch, 0, args.batch)
            rows = windows.rows(0, samples)
            span = np.searchsorted(starts, rows, side="right") - 1
            ids = np.zeros((len(rows), width), np.int32)
            mask = np.zeros((len(rows), width), bool)
            label = np.empty(len(rows), np.int64)
            for i, (r, s) in enumerate(zip(rows.tolist(), span.tolist(), strict=True)):
                if s not in cache:
                    f, g = groups[s]
                    cache[s] = f.read_row_group(g, columns=["input_ids", "label"])
                    while len(cache) > windows.max_groups:
                        cache.popitem(last=False)
                cache.move_to_end(s)
                row = cache[s].slice(r - int(starts[s]), 1)
                toks = numbers(row.column("input_ids").combine_chunks().values)
                n = min(width, toks.size)
                ids[i, :n] = toks[:n]
                mask[i, :n] = True
                label[i] = row.column("label")[0].as_py()
            yield {"input_ids": ids, "input_ids_mask": mask, "label": label}

    return batches(), lambda: (0, 0)


def run(side: str, args: argparse.Namespace, ctx: dict[str, Any], digest: bool) -> dict[str, Any]:
    t0 = time.perf_counter()
    if side == "local":
        it, stats = headrace_side(args, args.root_glob, None, True)
    elif side == "s3-headrace":
        it, stats = headrace_side(args, URL, ctx["store"], True)
    elif side == "s3-no-read-ahead":
        it, stats = headrace_side(args, URL, ctx["store"], False)
    else:
        it, stats = pyarrow_side(args, ctx["store"], ctx["names"])
    t1 = time.perf_counter()
    h = hashlib.sha256()
    first, n = 0.0, 0
    for batch in it:
        if n == 0:
            first = time.perf_counter() - t1
        if digest:
            update_digest(h, batch)
        if args.compute_ms:
            time.sleep(args.compute_ms / 1e3)
        n += 1
    t2 = time.perf_counter()
    fetched, requests = stats()
    return {
        "open_s": t1 - t0,
        "first_s": first,
        "bps": n / (t2 - t1),
        "fetched": fetched,
        "fetched_s": t2 - t1,
        "requests": requests,
        "digest": h.hexdigest() if digest else None,
    }


def ceiling(args: argparse.Namespace, ctx: dict[str, Any], paths: list[str]) -> float:
    """MB/s of bare concurrent GETs of every row group's byte range."""
    from headrace.io import ObjectStore

    requests = []
    for name, path in zip(ctx["names"], paths, strict=True):
        md = pq.ParquetFile(path).metadata
        for g in range(md.num_row_groups):
            rg = md.row_group(g)
            cols = [rg.column(j) for j in range(rg.num_columns)]
            lo = min(c.dictionary_page_offset or c.data_page_offset for c in cols)
            hi = max((c.dictionary_page_offset or c.data_page_offset) + c.total_compressed_size
                     for c in cols)  # fmt: skip
            requests.append((name, lo, hi - lo))
    with ObjectStore(URL, **ctx["store"]) as store:
        t0 = time.perf_counter()
        got = store.get_many(requests, max_in_flight=args.in_flight)
        dt = time.perf_counter() - t0
    return sum(len(g) for g in got) / dt / 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--group-rows", type=int, default=512)
    ap.add_argument("--steps", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--latency-ms", type=float, default=50)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--in-flight", type=int, default=64)
    ap.add_argument("--compute-ms", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--root", default=os.path.expanduser("~/.cache/headrace/bench-s3tables"))
    args = ap.parse_args()
    paths = write_files(args)
    args.root_glob = os.path.join(args.root, f"train-*-{args.rows}-{args.group_rows}.parquet")
    size = sum(os.path.getsize(p) for p in paths)
    _out(
        f"{args.files} Parquet files x {args.rows} rows (row groups of {args.group_rows}), "
        f"{size / MiB:.1f} MiB; B={args.batch}, width {args.width}, {args.steps} steps "
        f"({args.steps * args.batch / (args.files * args.rows):.2f} epochs), proxy "
        f"{args.latency_ms:g} ms, in_flight {args.in_flight}, compute {args.compute_ms:g} ms/step"
    )
    sides = ["local", "s3-headrace", "s3-no-read-ahead", "s3-pyarrow"]
    with bench_s3(URL, paths, latency_ms=args.latency_ms or None) as store:
        ctx = {"store": store, "names": [os.path.basename(p) for p in paths]}
        first = {s: run(s, args, ctx, digest=True) for s in sides}
        digests = {s: r["digest"] for s, r in first.items()}
        if len(set(digests.values())) != 1:
            _out(f"DIGESTS DIFFER: {digests}; refusing to report speed")
            return 1
        trials: dict[str, list[dict[str, Any]]] = {s: [] for s in sides}
        ceilings = []
        for _ in range(args.rounds):
            for s in sides:
                trials[s].append(run(s, args, ctx, digest=False))
            ceilings.append(ceiling(args, ctx, paths))
    _out()
    top = statistics.median(ceilings)
    _out(f"timed trials ({args.rounds} rounds, alternating; medians (min-max)):")
    _out(
        f"endpoint ceiling (bare concurrent GETs of all row groups): {top:.1f} MB/s "
        f"({min(ceilings):.1f}-{max(ceilings):.1f})"
    )
    _out("| side | batches/s | x s3-pyarrow | MB/s fetched | x ceiling | open s | 1st batch s "
         "| MiB fetched | GETs | sha256 |")  # fmt: skip
    _out("|---|---|---|---|---|---|---|---|---|---|")
    base = statistics.median(r["bps"] for r in trials["s3-pyarrow"])
    for s, rs in trials.items():
        bps = [r["bps"] for r in rs]
        med = statistics.median(bps)
        fetched = first[s]["fetched"]
        rate = statistics.median(r["fetched"] / r["fetched_s"] / 1e6 for r in rs)
        _out(
            f"| {s} | {med:,.1f} ({min(bps):,.1f}-{max(bps):,.1f}) | {med / base:.2f}x | "
            + (f"{rate:.1f} | {rate / top:.2f} | " if fetched else "- | - | ")
            + f"{statistics.median(r['open_s'] for r in rs):.3f} | "
            + f"{statistics.median(r['first_s'] for r in rs):.3f} | "
            + (f"{fetched / MiB:.1f} | {first[s]['requests']} | " if fetched else "- | - | ")
            + f"{first[s]['digest'][:12]} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
