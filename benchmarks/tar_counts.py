"""Opening tar (or TFRecord) shards: counts given vs walked from the headers, local and
S3, the walk on S3 by 4 KiB a miss (the old policy) vs growing spans (the new).

    PYTHONPATH=src python benchmarks/tar_counts.py [--shards 8] [--samples 200]
        [--member-kb 100] [--format tar] [--walk-skip-kb 512] [--latency-ms 20]
        [--rounds 3] [--root DIR]

``--shards`` shards of ``--samples`` samples (tar: a ``bin`` member of ``--member-kb``
and a ``cls``; TFRecord: a record of ``--member-kb``) are written once under
``--root``; then, alternating within each round, a ``FileSource`` is opened over them
with the counts given (``samples_per_file=N``: the listing's cost) and with
``"header"`` (each shard's headers walked), from local disk and from a folder served as
S3 (``_files_s3``: only the bytes asked are read) behind a ``LatencyProxy`` of
``--latency-ms`` (latency only: the link's bandwidth is the loopback's). On S3 the walk
runs twice: ``4KiB`` reads a block of 4 KiB a miss (``WALK_SKIP`` = 0: the policy before
2026-12-04), ``grown`` as headrace does (``--walk-skip-kb`` sets ``WALK_SKIP``). Each side
prints its open time, GETs, bytes fetched and counts/fingerprint digest: one digest for all.

Prediction (2026-12-03, written before the first run): a member larger than the 4 KiB
a header read fetches costs a read of its own, so each sample here is one round trip, in
series within a shard: on S3 about ``samples x latency`` (200 x 20 ms = 4 s).

Prediction (2026-12-04, growing spans, written before the first run): 8 shards of 200
x 100 kB: 4KiB as before (~4.9 s, 1,608 GETs); grown ~11 GETs a shard (4 KiB, then
twice the skip: 192 kB, 384 kB ... 4 MiB, then 4 MiB to the end) in series, ~35 ms each
with the transfer: ~0.5 s, ~90 GETs, every shard's bytes (160 MB, 8x more than 4KiB's
1,608 x 4 KiB... here 25x). One shard of 200 x 30 kB: 4KiB ~200 GETs, ~4 s; grown ~7 GETs,
~0.2 s. One shard of 50 x 1 MB: a GET a member both ways (past WALK_SKIP, 512 KiB), ~1 s;
with --walk-skip-kb 4096 ~15 GETs, ~0.4 s, the shard's 50 MB fetched.
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
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager

import numpy as np
from _files_s3 import files_s3
from _out import out

from headrace.bench._s3_serve import _proxy
from headrace.formats import FileSource, _sparse
from headrace.formats._tfrecord import encode_tfrecord


def write(root: str, fmt: str, shards: int, samples: int, member: int) -> None:
    os.makedirs(root, exist_ok=True)
    rng = np.random.default_rng(0)
    for s in range(shards):
        path = os.path.join(root, f"shard-{s:05d}.{fmt}")
        if os.path.exists(path):
            continue
        if fmt == "tfrecord":
            records = [rng.bytes(member) for _ in range(samples)]
            with open(path + ".part", "wb") as f:
                f.write(encode_tfrecord({}, records=records))
        else:
            with tarfile.open(path + ".part", "w") as tar:
                for i in range(samples):
                    for field, data in (("bin", rng.bytes(member)), ("cls", str(i).encode())):
                        info = tarfile.TarInfo(f"{s:05d}{i:06d}.{field}")
                        info.size = len(data)
                        tar.addfile(info, io.BytesIO(data))
        os.replace(path + ".part", path)


@contextmanager
def walk_skip(skip: int) -> Iterator[None]:
    """The walk's ``WALK_SKIP`` set to ``skip`` (0: a block of 4 KiB a miss, as before)."""
    was = _sparse.WALK_SKIP
    _sparse.WALK_SKIP = skip
    try:
        yield
    finally:
        _sparse.WALK_SKIP = was


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--member-kb", type=int, default=100)
    ap.add_argument("--format", choices=("tar", "tfrecord"), default="tar")
    ap.add_argument("--walk-skip-kb", type=int, default=_sparse.WALK_SKIP >> 10)
    ap.add_argument("--latency-ms", type=float, default=20.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--root", default=os.path.expanduser("~/.cache/headrace/bench/tar"))
    args = ap.parse_args()
    fmt = args.format
    root = os.path.join(args.root, f"{fmt}-{args.shards}x{args.samples}x{args.member_kb}k")
    write(root, fmt, args.shards, args.samples, args.member_kb * 1000)
    kind = "records" if fmt == "tfrecord" else "samples"
    out(f"{args.shards} {fmt} shards of {args.samples} {kind} of {args.member_kb} kB")
    n = args.samples
    sides: dict[str, Callable[[], FileSource]] = {
        "local given": lambda: FileSource(root, format=fmt, samples_per_file=n),
        "local header": lambda: FileSource(root, format=fmt, samples_per_file="header"),
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

        def s3(spf: int | str, skip: int | None = None) -> Callable[[], FileSource]:
            def open_() -> FileSource:
                with walk_skip(_sparse.WALK_SKIP if skip is None else skip):
                    return FileSource(
                        "s3://any/", store_options=folder, format=fmt, samples_per_file=spf
                    )

            return open_

        sides[f"{ms} given"] = s3(n)
        sides[f"{ms} header 4KiB"] = s3("header", 0)
        sides[f"{ms} header grown"] = s3("header", args.walk_skip_kb << 10)
        times: dict[str, list[float]] = {s: [] for s in sides}
        reads: dict[str, tuple[int, int]] = {}
        digests: dict[str, set[str]] = {s: set() for s in sides}
        for r in range(args.rounds):
            for side in list(sides) if r % 2 == 0 else list(sides)[::-1]:
                t0 = time.perf_counter()
                src = sides[side]()
                times[side].append(time.perf_counter() - t0)
                if src.count_stats is not None:
                    reads[side] = (src.count_stats.reads, src.count_stats.bytes)
                fp = json.dumps(src.fingerprint(), sort_keys=True).encode()
                digests[side].add(hashlib.sha256(src.counts.tobytes() + fp).hexdigest()[:12])
                src.close()
    out(f"open time, median of {args.rounds} (min-max), reads, bytes fetched, digest:")
    for side, ts in times.items():
        extra = ""
        if side in reads:
            k, b = reads[side]
            extra = f"  {k:,} reads, {b:,} bytes ({b / (args.shards * n):.0f} a sample)"
        got = ",".join(sorted(digests[side]))
        out(
            f"  {side:24s} {statistics.median(ts):7.3f}s ({min(ts):.3f}-{max(ts):.3f}) {got}{extra}"
        )
    every = set().union(*digests.values())
    out(f"counts/fingerprint digests: {sorted(every)}")
    return 0 if len(every) == 1 else 1


if __name__ == "__main__":
    raise SystemExit(main())
