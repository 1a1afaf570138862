"""A token file read locally vs the same file on S3 (moto behind a latency proxy).

    PYTHONPATH=src python benchmarks/tokens_s3.py [--mib 64] [--window-mib 16] [--block-mib 4]
        [--steps 1000] [--batch 32] [--compute-ms 0] [--latency-ms 50] [--rounds 3]
        [--in-flight 64] [--no-read-ahead] [--cache] [--root DIR]

One uint32 token file (generated once under ``--root``, seeded) is read by
``TokenSource`` through the ``Loader`` (B=32, L=1024, prefetch 8) two ways:
``local`` (the path: mapped windows, page cache warm after the first pass) and
``s3`` (the same bytes uploaded to a moto server started for the run, reached
through a ``LatencyProxy`` in a child process, so it competes with neither for
the GIL). Each side first gets a *measurement pass* (fresh source: open time,
first-batch time, SHA-256 of every batch, bytes fetched, requests, most block
reads in flight, request latencies); the script refuses to report unless both
digests are equal (``--no-read-ahead`` adds a third side: S3 with
``read_ahead=False``; ``--cache`` another: S3 through a local block cache,
``cache_dir``, which its measurement pass fills and its trials read;
``--compute-ms`` sleeps that long per step, as a
training step would). Then timed trials alternate (local, s3, local, s3, ...),
each with a fresh source and loader, batches consumed but not hashed; medians
(min-max) reported.

moto reads the whole object for every ranged GET (a 4 MiB range costs ~11 ms
plus ~0.65 ms per MiB of object here), so the object is kept small (64 MiB)
and cut into several windows (16 MiB) to exercise window read-ahead; at this
size only 4 blocks make a window, so no more than ~8 block reads are ever
wanted at once.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

from _out import out as _out

from headrace.bench._datagen import write_token_file
from headrace.bench._s3_serve import bench_s3
from headrace.formats import TokenSource
from headrace.pipeline import Loader
from headrace.testing import update_digest

MiB = 1 << 20
URL = "s3://headrace-bench/tokens"
L = 1024


def _source(
    args: argparse.Namespace,
    where: str,
    store: dict[str, Any] | None,
    read_ahead: bool,
    cache: str | None = None,
) -> TokenSource:
    kw: dict[str, Any] = {
        "read_ahead": read_ahead,
        "dtype": "uint32",
        "context": L,
        "window_bytes": int(args.window_mib * MiB),
        "block_bytes": int(args.block_mib * MiB),
    }
    if store is None:
        return TokenSource(where, **kw)
    return TokenSource(where, store_options=store, in_flight=args.in_flight, cache_dir=cache, **kw)


def _pass(
    args: argparse.Namespace,
    where: str,
    store: dict[str, Any] | None,
    read_ahead: bool,
    cache: str | None = None,
    *,
    digest: bool,
) -> dict[str, Any]:
    """One fresh source and loader over ``--steps`` batches; figures (and a digest)."""
    t0 = time.perf_counter()
    src = _source(args, where, store, read_ahead, cache)
    t1 = time.perf_counter()
    h = hashlib.sha256()
    first = 0.0
    with Loader(src, batch_size=args.batch, seed=args.seed, steps=args.steps) as loader:
        t2 = time.perf_counter()
        n = 0
        for batch in loader:
            if n == 0:
                first = time.perf_counter() - t2
            if digest:
                update_digest(h, batch)
            else:
                int(batch["x"][0, 0])  # touch it: the consumer holds a real batch
            if args.compute_ms:
                time.sleep(args.compute_ms / 1e3)  # a training step: frees the CPU and GIL
            n += 1
        t3 = time.perf_counter()
    res: dict[str, Any] = {
        "open_s": t1 - t0,
        "first_batch_s": first,
        "wall_s": t3 - t2,
        "batches_per_s": n / (t3 - t2),
        "bytes_read": src.stats.bytes_read,
        "windows_opened": src.stats.windows_opened,
        "digest": h.hexdigest() if digest else None,
    }
    stats = src.object_stats
    if stats is not None:
        lat = sorted(stats.latencies_s)
        res.update(
            fetched=stats.bytes,
            requests=stats.requests,
            retries=stats.retries,
            in_flight=stats.max_in_flight_observed,
            mb_per_s=stats.bytes / (t3 - t2) / 1e6,
            lat_p50_ms=1e3 * lat[len(lat) // 2] if lat else 0.0,
            lat_p95_ms=1e3 * lat[int(len(lat) * 0.95)] if lat else 0.0,
        )
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mib", type=float, default=64)
    ap.add_argument("--window-mib", type=float, default=16)
    ap.add_argument("--block-mib", type=float, default=4)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--compute-ms", type=float, default=0.0, help="sleep per step (compute)")
    ap.add_argument("--latency-ms", type=float, default=50)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--in-flight", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--no-read-ahead",
        action="store_true",
        help="also time the S3 side with read_ahead=False (the next window only on demand)",
    )
    ap.add_argument(
        "--cache",
        action="store_true",
        help="also time S3 through a local block cache (cache_dir): its measurement pass "
        "fills the cache, its trials read it",
    )
    ap.add_argument("--root", default=os.path.expanduser("~/.cache/headrace/bench-s3tok"))
    args = ap.parse_args()

    tokens = int(args.mib * MiB) // 4
    path = os.path.join(args.root, f"tokens-{args.mib:g}mib-uint32-s{args.seed}.bin")
    write_token_file(path, tokens, dtype="uint32", seed=args.seed)
    B = args.batch
    batch_bytes = B * (L + 1) * 4
    _out(
        f"token file {args.mib:g} MiB ({tokens:,} uint32), window {args.window_mib:g} MiB, "
        f"block {args.block_mib:g} MiB, B={B} L={L} ({batch_bytes:,} B per batch), "
        f"{args.steps} steps, compute {args.compute_ms:g} ms/step, proxy {args.latency_ms:g} ms, "
        f"in_flight {args.in_flight}"
    )
    t = time.perf_counter()
    with bench_s3(URL, [path], latency_ms=args.latency_ms or None) as store:
        _out(f"moto started, file uploaded, proxy up: {time.perf_counter() - t:.1f} s")
        url = f"{URL}/{os.path.basename(path)}"
        sides: dict[str, tuple[Any, ...]] = {
            "local": (path, None, True),
            "s3": (url, store, True),
        }
        if args.no_read_ahead:
            sides["s3-no-read-ahead"] = (url, store, False)
        cache_dir = tempfile.mkdtemp(prefix="headrace-tokens-cache-")
        if args.cache:
            sides["s3-cache"] = (url, store, True, cache_dir)
        first = {name: _pass(args, *side, digest=True) for name, side in sides.items()}
        digests = {name: r["digest"] for name, r in first.items()}
        if len(set(digests.values())) != 1:
            _out(f"DIGESTS DIFFER: {digests}; refusing to report speed")
            return 1
        trials: dict[str, list[dict[str, Any]]] = {name: [] for name in sides}
        for _ in range(args.rounds):
            for name, side in sides.items():
                trials[name].append(_pass(args, *side, digest=False))
        shutil.rmtree(cache_dir, ignore_errors=True)

    _out()
    _out("measurement pass (fresh source, digests every batch):")
    _out("| side | open s | 1st batch s | batches/s | MB/s fetched | MiB fetched | windows "
         "| requests | retries | in flight (max) | lat p50/p95 ms | sha256 |")  # fmt: skip
    _out("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, r in first.items():
        remote = "fetched" in r
        _out(
            f"| {name} | {r['open_s']:.3f} | {r['first_batch_s']:.3f} | "
            + f"{r['batches_per_s']:,.0f} | "
            + (f"{r['mb_per_s']:.1f} | {r['fetched'] / MiB:.1f} | " if remote else "- | - | ")
            + f"{r['windows_opened']} | "
            + (
                f"{r['requests']} | {r['retries']} | {r['in_flight']} | "
                f"{r['lat_p50_ms']:.0f}/{r['lat_p95_ms']:.0f} | "
                if remote
                else "- | - | - | - | "
            )
            + f"{r['digest'][:12]} |"
        )
    _out()
    _out(f"timed trials ({args.rounds} rounds, alternating, medians (min-max)):")
    _out("| side | batches/s | GB/s delivered | MB/s fetched | MiB fetched | 1st batch s | open s "
         "| in flight (max) | lat p50/p95 ms | sha256 |")  # fmt: skip
    _out("|---|---|---|---|---|---|---|---|---|---|")

    def med(rs: list[dict[str, Any]], key: str) -> float:
        return statistics.median(r[key] for r in rs)

    for name, rs in trials.items():
        bps = [r["batches_per_s"] for r in rs]
        remote = (
            f"{med(rs, 'mb_per_s'):.1f} | {med(rs, 'fetched') / MiB:.1f} | "
            if "fetched" in rs[0]
            else "- | - | "
        )
        tail = (
            f"{max(r['in_flight'] for r in rs)} | "
            f"{med(rs, 'lat_p50_ms'):.0f}/{med(rs, 'lat_p95_ms'):.0f} | "
            if "fetched" in rs[0]
            else "- | - | "
        )
        _out(
            f"| {name} | {med(rs, 'batches_per_s'):,.0f} ({min(bps):,.0f}-{max(bps):,.0f}) | "
            f"{med(rs, 'batches_per_s') * batch_bytes / 1e9:.3f} | {remote}"
            f"{med(rs, 'first_batch_s'):.3f} | {med(rs, 'open_s'):.3f} | {tail}"
            f"{first[name]['digest'][:12]} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
