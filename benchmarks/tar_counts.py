"""Opening WebDataset tar shards: counts given vs walked from the headers, local and S3.

    PYTHONPATH=src python benchmarks/tar_counts.py [--shards 8] [--samples 200]
        [--member-kb 100] [--latency-ms 20] [--rounds 3] [--root DIR]

``--shards`` tar shards of ``--samples`` samples (a ``bin`` member of ``--member-kb``
and a ``cls``) are written once under ``--root``; then, alternating within each
round, a ``FileSource(format="tar")`` is opened over them with the counts given
(``samples_per_file=N``: the listing's cost) and with ``"header"`` (the default:
each shard's headers walked), from local disk and from a folder served as S3
(``_files_s3``: only the bytes asked are read) behind a ``LatencyProxy`` of
``--latency-ms``. Every side must give the same counts and fingerprint (one digest).

Prediction (written before the first run): a member larger than the 4 KiB a header
read fetches costs a read of its own, so each sample here is one round trip, in
series within a shard (the next header's place is known only from this one): on S3
about ``samples x latency`` (200 x 20 ms = 4 s) whatever the shard count up to
``in_flight``; locally a few ms a shard.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import statistics
import tarfile
import time
from collections.abc import Callable
from contextlib import ExitStack

import numpy as np
from _files_s3 import files_s3
from _out import out

from headrace.bench._s3_serve import _proxy
from headrace.formats import FileSource


def write(root: str, shards: int, samples: int, member: int) -> None:
    os.makedirs(root, exist_ok=True)
    rng = np.random.default_rng(0)
    for s in range(shards):
        path = os.path.join(root, f"shard-{s:05d}.tar")
        if os.path.exists(path):
            continue
        with tarfile.open(path + ".part", "w") as tar:
            for i in range(samples):
                for field, data in (("bin", rng.bytes(member)), ("cls", str(i).encode())):
                    info = tarfile.TarInfo(f"{s:05d}{i:06d}.{field}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
        os.replace(path + ".part", path)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--member-kb", type=int, default=100)
    ap.add_argument("--latency-ms", type=float, default=20.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--root", default=os.path.expanduser("~/.cache/headrace/bench/tar"))
    args = ap.parse_args()
    root = os.path.join(args.root, f"{args.shards}x{args.samples}x{args.member_kb}k")
    write(root, args.shards, args.samples, args.member_kb * 1000)
    out(f"{args.shards} shards of {args.samples} samples of {args.member_kb} kB")
    n = args.samples
    sides: dict[str, Callable[[], FileSource]] = {
        "local given": lambda: FileSource(root, format="tar", samples_per_file=n),
        "local header": lambda: FileSource(root, format="tar"),
    }
    with ExitStack() as stack:
        folder = {
            "endpoint": stack.enter_context(
                _proxy(stack.enter_context(files_s3(root)), args.latency_ms, None)
            ),
            "region": "us-east-1",
            "access_key_id": "bench",
            "secret_access_key": "bench",
            "path_style": True,
            "allow_http": True,
        }
        ms = f"s3+{args.latency_ms:g}ms"
        sides[f"{ms} given"] = lambda: FileSource(
            "s3://any/", store_options=folder, format="tar", samples_per_file=n
        )
        sides[f"{ms} header"] = lambda: FileSource("s3://any/", store_options=folder, format="tar")
        times: dict[str, list[float]] = {s: [] for s in sides}
        reads: dict[str, tuple[int, int]] = {}
        digests: set[str] = set()
        for r in range(args.rounds):
            for side in list(sides) if r % 2 == 0 else list(sides)[::-1]:
                t0 = time.perf_counter()
                src = sides[side]()
                times[side].append(time.perf_counter() - t0)
                if src.count_stats is not None:
                    reads[side] = (src.count_stats.reads, src.count_stats.bytes)
                fp = json.dumps(src.fingerprint(), sort_keys=True).encode()
                digests.add(hashlib.sha256(src.counts.tobytes() + fp).hexdigest()[:12])
                src.close()
    out(f"open time, median of {args.rounds} (min-max):")
    for side, ts in times.items():
        extra = ""
        if side in reads:
            k, b = reads[side]
            extra = f"  {k:,} reads, {b:,} bytes ({b / (args.shards * n):.0f} a sample)"
        out(f"  {side:24s} {statistics.median(ts):7.3f}s ({min(ts):.3f}-{max(ts):.3f}){extra}")
    out(f"counts/fingerprint digests: {sorted(digests)}")
    return 0 if len(digests) == 1 else 1


if __name__ == "__main__":
    raise SystemExit(main())
