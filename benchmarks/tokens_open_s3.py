"""Opening a TokenSource over many small shards on S3: per-object requests vs one listing.

    PYTHONPATH=src python benchmarks/tokens_open_s3.py [--shards 300] [--latency-ms 30]
        [--rounds 3] [--steps 20] [--bare]

``--shards`` raw uint16 shards (each with a ``.json`` sidecar, every fifth a Megatron
``.bin``/``.idx`` pair instead; with ``--bare``, neither: the dtype is passed) are
uploaded to a moto server started for the run and reached through a
:class:`~headrace.emulate.LatencyProxy` (``--latency-ms`` per request).
Two sides alternate (per-object, listing, per-object, listing, ...): ``per-object`` opens
with the listing turned off (``_token_listing.LIST_MIN_SHARDS`` set past the shard count:
a GET of each shard's head and one of each sidecar probe), ``listing`` as the source does
by default. Each trial is a fresh source: open time, requests the proxy saw while it
opened, requests ObjectStats counted, and SHA-256 of ``--steps`` batches, which must be
equal on both sides. Medians (min-max) reported.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from _out import out

import headrace.formats._token_listing as listing_mod
from headrace.emulate import LatencyProxy, LocalS3
from headrace.formats import TokenSource, write_megatron_index, write_token_sidecar
from headrace.pipeline import Loader
from headrace.testing import update_digest

BUCKET = "headrace-bench"


def _upload(s3: LocalS3, shards: int, root: Path, bare: bool) -> list[str]:
    s3.create_bucket(BUCKET)
    client = s3.info.boto3_client()
    urls = []
    for i in range(shards):
        tokens = np.random.default_rng(i).integers(0, 60_000, 4096 + 17 * i).astype(np.uint16)
        name = f"shards/s{i:05d}.bin"
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        tokens.tofile(path)
        keys = [name]
        if bare:
            pass
        elif i % 5 == 4:
            idx = path.with_suffix(".idx")
            write_megatron_index(idx, np.uint16, np.array([tokens.size]))
            keys.append(name[:-4] + ".idx")
        else:
            write_token_sidecar(path, "uint16", tokens=tokens.size)
            keys.append(name + ".json")
        for key in keys:
            client.put_object(Bucket=BUCKET, Key=key, Body=(root / key).read_bytes())
        urls.append(f"s3://{BUCKET}/{name}")
    return urls


def _trial(urls: list[str], options: dict[str, Any], proxy: LatencyProxy, steps: int) -> dict:
    proxy.reset_stats()
    t0 = time.perf_counter()
    src = TokenSource(
        urls, dtype="uint16", context=256, store_options=options, window_bytes=64 << 10
    )
    open_s = time.perf_counter() - t0
    seen = proxy.stats.requests
    counted = src.object_stats.requests if src.object_stats is not None else 0
    h = hashlib.sha256()
    with Loader(src, batch_size=8, seed=3, steps=steps) as loader:
        for batch in loader:
            update_digest(h, batch)
    return {"open_s": open_s, "proxy": seen, "counted": counted, "digest": h.hexdigest()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shards", type=int, default=300)
    ap.add_argument("--latency-ms", type=float, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--bare", action="store_true", help="no sidecars or indexes")
    args = ap.parse_args()
    default_min = listing_mod.LIST_MIN_SHARDS
    with tempfile.TemporaryDirectory() as tmp, LocalS3() as s3:
        urls = _upload(s3, args.shards, Path(tmp), args.bare)
        with LatencyProxy(s3.endpoint, latency_ms=args.latency_ms) as proxy:
            options = {**s3.info.store_options(), "endpoint": proxy.endpoint}
            runs: dict[str, list[dict]] = {"per-object": [], "listing": []}
            for r in range(args.rounds):
                for side, least in (("per-object", args.shards + 1), ("listing", default_min)):
                    listing_mod.LIST_MIN_SHARDS = least
                    res = _trial(urls, options, proxy, args.steps)
                    runs[side].append(res)
                    out(
                        f"round {r} {side:10s} open {res['open_s']:.3f} s, proxy saw "
                        f"{res['proxy']} requests, ObjectStats {res['counted']}, "
                        f"digest {res['digest'][:16]}"
                    )
            listing_mod.LIST_MIN_SHARDS = default_min
    digests = {side: {r["digest"] for r in rs} for side, rs in runs.items()}
    if len(set().union(*digests.values())) != 1:
        out(f"DIGESTS DIFFER: {digests}")
        return 1
    for side, rs in runs.items():
        t = [r["open_s"] for r in rs]
        out(
            f"{side:10s} open median {statistics.median(t):.3f} s ({min(t):.3f}-{max(t):.3f}), "
            f"requests {rs[0]['proxy']} (ObjectStats {rs[0]['counted']}), "
            f"digest {rs[0]['digest']}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
