"""Epochs over JPEGs on a slow S3 endpoint, with and without a local object cache.

    python benchmarks/object_cache.py [--files 256 --latency-ms 50 --in-flight 64
                                       --trials 3 --raw --json OUT]

Starts moto on 127.0.0.1 with ``--files`` JPEGs (640 x 640, ~200 KB) and a
proxy in front that waits ``--latency-ms`` per request. Each trial reads one
epoch (batch 16) on each side, in alternating order (A B C D, D C B A, ...):

``store``       ``FileSource("s3://...")``: every epoch from the store
``cache-cold``  with ``cache_dir`` empty: from the store, writing each object
``cache-warm``  with ``cache_dir`` holding every object (filled before the
                trials, by one epoch): the next epoch of a long run
``local``       the same files on local disk: the reference for a warm cache

Reports samples/s (median of the trials) per side, the ratio to ``store``,
GETs through the proxy per epoch, and each side's SHA-256 digest of the
epoch: all four must be equal. ``--raw`` hands over the bytes undecoded
(I/O only). The cache and the local files sit in the page cache here; on a
dataset larger than memory, a warm epoch reads the local disk.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _out import out

from headrace.emulate import LatencyProxy, LocalS3
from headrace.formats import FileSource, synthetic_arrays
from headrace.formats import write_sample_file as write
from headrace.pipeline import Loader
from headrace.testing import batch_digest

BUCKET = "cache-bench"
BATCH = 16
SIDES = ("store", "cache-cold", "cache-warm", "local")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=256)
    ap.add_argument("--latency-ms", type=float, default=50.0)
    ap.add_argument("--in-flight", type=int, default=64)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--raw", action="store_true", help="hand over undecoded bytes")
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args(argv)
    steps = a.files // BATCH
    with tempfile.TemporaryDirectory(prefix="headrace-cache-bench-") as tmp:
        root = Path(tmp)
        files = root / "files"
        files.mkdir()
        for i in range(a.files):
            write(
                "jpeg",
                files / f"{i:05d}.jpg",
                synthetic_arrays("jpeg", seed=i, shape=(640, 640, 3)),
            )
        mb = sum(p.stat().st_size for p in files.iterdir()) / 1e6
        with LocalS3() as s3:
            s3.create_bucket(BUCKET)
            client = s3.info.boto3_client()
            for p in sorted(files.iterdir()):
                client.put_object(Bucket=BUCKET, Key=f"jpeg/{p.name}", Body=p.read_bytes())
            with LatencyProxy(s3.endpoint, latency_ms=a.latency_ms) as proxy:
                opts = {**s3.info.store_options(), "endpoint": proxy.endpoint}
                common: dict[str, Any] = {"format": "jpeg", "decode": not a.raw}

                def make(side: str, trial: int) -> FileSource:
                    if side == "local":
                        return FileSource(files, **common)
                    kw: dict[str, Any] = {"in_flight": a.in_flight}
                    if side == "cache-cold":
                        kw["cache_dir"] = root / f"cold-{trial}"
                    elif side == "cache-warm":
                        kw["cache_dir"] = root / "warm"
                    return FileSource(f"s3://{BUCKET}/jpeg", store_options=opts, **common, **kw)

                runs = run_sides(
                    make,
                    lambda src: _epoch(src, steps),
                    proxy,
                    a.trials,
                    lambda t: root / f"cold-{t}",
                )
    out(
        f"{a.files} JPEGs ({mb:.1f} MB), {a.latency_ms:g} ms per request, {a.in_flight} in "
        f"flight, batch {BATCH}, {'raw bytes' if a.raw else 'decoded'}, {a.trials} trials "
        "(A B C D, D C B A, ...)"
    )
    report: dict[str, Any] = {
        "files": a.files,
        "megabytes": mb,
        "latency_ms": a.latency_ms,
        "in_flight": a.in_flight,
        "batch": BATCH,
        "decode": not a.raw,
        "trials": a.trials,
    }
    report["sides"], report["digests_equal"] = report_sides(runs)
    if a.json:
        a.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0 if report["digests_equal"] else 1


def report_sides(runs: dict[str, list[dict[str, Any]]]) -> tuple[dict[str, Any], bool]:
    """Print a table of each side's median samples/s (over the ``store`` side's), GETs
    an epoch and digest, and whether every trial of every side gave the same digest;
    return the medians by side, and that verdict."""
    out(f"{'side':11} {'samples/s':>10} {'x store':>8} {'GETs/epoch':>11}  digest")
    base = statistics.median(r["samples_per_s"] for r in runs["store"])
    digests = {r["digest"] for trials in runs.values() for r in trials}
    sides = {}
    for side, trials in runs.items():
        rate = statistics.median(r["samples_per_s"] for r in trials)
        gets = statistics.median(r["gets"] for r in trials)
        sides[side] = {
            "median_samples_per_s": rate,
            "over_store": rate / base,
            "gets_per_epoch": gets,
            "trials": trials,
        }
        digest = trials[0]["digest"][:12]
        out(f"{side:11} {rate:>10.1f} {rate / base:>7.2f}x {gets:>11.0f}  {digest}")
    out("digests equal" if len(digests) == 1 else f"DIGESTS DIFFER: {sorted(digests)}")
    return sides, len(digests) == 1


def run_sides(
    make: Callable[[str, int], Any],
    epoch: Callable[[Any], dict[str, Any]],
    proxy: LatencyProxy,
    trials: int,
    cold: Callable[[int], Path],
) -> dict[str, list[dict[str, Any]]]:
    """Each side's epochs (``epoch`` of ``make(side, trial)``, the GETs through ``proxy``
    added), trial after trial in alternating order (A B C D, D C B A, ...), after an
    epoch that fills the warm cache; ``cold(trial)``, the trial's empty cache, is
    removed after it."""
    epoch(make("cache-warm", -1))  # fills the warm cache
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in SIDES}
    for t in range(trials):
        for side in SIDES if t % 2 == 0 else SIDES[::-1]:
            proxy.reset_stats()
            r = epoch(make(side, t))
            r["gets"] = proxy.stats.requests
            runs[side].append(r)
            shutil.rmtree(cold(t), ignore_errors=True)
    return runs


def _epoch(src: FileSource, steps: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    with Loader(src, batch_size=BATCH, seed=1, steps=steps) as loader:
        digest = batch_digest(loader)
    seconds = time.perf_counter() - t0
    cache = src.cache_stats
    return {
        "seconds": seconds,
        "samples_per_s": steps * BATCH / seconds,
        "digest": digest,
        "cache": None if cache is None else cache.to_dict(),
    }


if __name__ == "__main__":
    sys.exit(main())
