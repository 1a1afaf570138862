"""Opening a dataset of NPY shards of different lengths: counts given vs read from headers.

    PYTHONPATH=src python benchmarks/file_counts.py [--files 10000] [--latency-ms 50]
        [--rounds 3] [--root DIR] [--no-s3] [--no-moto]

``--files`` NPY shards of ~16 KB (``(c, 4)`` float32, ``c`` from 520 to 1,000) are
written once under ``--root``; then, alternating within each round, a
``FileSource`` is opened over them with ``samples_per_file=COUNTS`` (a list: no
header is read; the listing's cost) and with ``samples_per_file="header"`` (each
shard's 128-byte NPY header read, ``in_flight`` at a time), from local disk
(also with ``in_flight=1`` and 4), from moto directly and behind a
``LatencyProxy`` of ``--latency-ms`` (its own process), and from ``_files_s3``
(a folder served as S3, reading only the bytes asked: moto's own cost per
request, ~3 ms of one core, is not what is measured) behind the same latency,
there also as a restart with ``cache_dir`` (the counts kept by a first open).
The header side's open
time minus the list side's is what reading the headers costs; ``count_stats``
says how many reads and bytes it took. Every side must give the same counts and
the same fingerprint (printed: one digest each).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

import numpy as np
from _files_s3 import files_s3
from _out import out

from headrace.bench._s3_serve import _proxy, endpoint_info, upload
from headrace.formats import FileSource

URL = "s3://headrace-bench/counts"


def lengths(n: int) -> list[int]:
    return [1000 if f % 10 else 520 + f % 481 for f in range(n)]


def write(root: str, n: int) -> list[str]:
    os.makedirs(root, exist_ok=True)
    paths = []
    for f, c in enumerate(lengths(n)):
        p = os.path.join(root, f"shard-{f:05d}.npy")
        if not os.path.exists(p):
            np.save(p, np.full((c, 4), f, dtype=np.float32))
        paths.append(p)
    return paths


def timed(make: Callable[[], FileSource]) -> tuple[float, FileSource]:
    t0 = time.perf_counter()
    src = make()
    return time.perf_counter() - t0, src


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=10_000)
    ap.add_argument("--latency-ms", type=float, default=50.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--root", default=os.path.expanduser("~/.cache/headrace/bench/counts"))
    ap.add_argument("--no-s3", action="store_true")
    ap.add_argument("--no-moto", action="store_true")
    args = ap.parse_args()
    root = os.path.join(args.root, str(args.files))
    paths = write(root, args.files)
    counts = lengths(args.files)
    out(f"{args.files:,} NPY shards, {sum(map(os.path.getsize, paths)) / 1e6:.1f} MB")
    sides: dict[str, Callable[[], FileSource]] = {
        "local list": lambda: FileSource(root, format="npy", samples_per_file=counts),
        "local header": lambda: FileSource(root, format="npy", samples_per_file="header"),
        "local header, in_flight=1": lambda: FileSource(
            root, format="npy", samples_per_file="header", in_flight=1
        ),
        "local header, in_flight=4": lambda: FileSource(
            root, format="npy", samples_per_file="header", in_flight=4
        ),
    }
    with ExitStack() as stack:
        if not args.no_s3:
            upstream = stack.enter_context(files_s3(root))
            folder = {
                "endpoint": stack.enter_context(_proxy(upstream, args.latency_ms, None)),
                "region": "us-east-1",
                "access_key_id": "bench",
                "secret_access_key": "bench",
                "path_style": True,
                "allow_http": True,
            }

            cache_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="counts-"))

            def on_folder(spf: Any, **kw: Any) -> FileSource:
                return FileSource(
                    "s3://any/", store_options=folder, format="npy", samples_per_file=spf, **kw
                )

            sides[f"folder+{args.latency_ms:g}ms list"] = lambda: on_folder(counts)
            sides[f"folder+{args.latency_ms:g}ms header"] = lambda: on_folder("header")
            # A restart with cache_dir: the counts kept by the first open (made here,
            # untimed), read as one local entry instead of a ranged GET a file.
            on_folder("header", cache_dir=cache_dir).close()
            sides[f"folder+{args.latency_ms:g}ms header, counts kept"] = lambda: on_folder(
                "header", cache_dir=cache_dir
            )
        if not args.no_s3 and not args.no_moto:
            from headrace.emulate import LocalS3

            endpoint = stack.enter_context(LocalS3()).endpoint
            info = endpoint_info(endpoint)
            t0 = time.perf_counter()
            upload(info, "headrace-bench", "counts", paths)
            out(f"uploaded to moto in {time.perf_counter() - t0:.1f} s")
            direct = info.store_options()
            slow = {
                **direct,
                "endpoint": stack.enter_context(_proxy(endpoint, args.latency_ms, None)),
            }
            for label, opts in (("moto", direct), (f"moto+{args.latency_ms:g}ms", slow)):

                def make(spf: Any, o: dict[str, Any] = opts) -> FileSource:
                    return FileSource(URL, store_options=o, format="npy", samples_per_file=spf)

                sides[f"{label} list"] = lambda m=make: m(counts)
                sides[f"{label} header"] = lambda m=make: m("header")
        times: dict[str, list[float]] = {s: [] for s in sides}
        counting: dict[str, list[float]] = {s: [] for s in sides}
        reads: dict[str, tuple[int, int]] = {}
        digests: set[str] = set()
        for r in range(args.rounds):
            order = list(sides) if r % 2 == 0 else list(sides)[::-1]
            for side in order:
                t, src = timed(sides[side])
                times[side].append(t)
                if src.count_stats is not None:
                    counting[side].append(src.count_stats.seconds)
                    reads[side] = (src.count_stats.reads, src.count_stats.bytes)
                fp = json.dumps(src.fingerprint(), sort_keys=True).encode()
                digests.add(
                    hashlib.sha256(src.counts.tobytes()).hexdigest()[:12]
                    + "/"
                    + hashlib.sha256(fp).hexdigest()[:12]
                )
                src.close()
            out(f"round {r + 1}: " + ", ".join(f"{s} {times[s][-1]:.2f}s" for s in sides))
    out(f"open time, median of {args.rounds} (min-max), and the header reads' own time:")
    for side, ts in times.items():
        extra = ""
        if counting[side]:
            n, b = reads[side]
            extra = (
                f"  counting {statistics.median(counting[side]):.3f}s, {n:,} reads, {b:,} bytes "
                f"({b / args.files:.0f} per file)"
            )
        out(f"  {side:36s} {statistics.median(ts):7.3f}s ({min(ts):.3f}-{max(ts):.3f}){extra}")
    out(f"counts/fingerprint digests: {sorted(digests)}")
    return 0 if len(digests) == 1 else 1


if __name__ == "__main__":
    raise SystemExit(main())
