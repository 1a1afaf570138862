"""Epochs of an MDS dataset on a slow S3 endpoint, with and without ``cache_dir``.

    python benchmarks/mds_cache_s3.py [--samples 20000 --latency-ms 50 --trials 3]

Writes ``--samples`` samples (``tokens``: 1,000-2,000 uint16 ids, ~3 KB; ``id``) in
shards of 500 as Streaming's ``MDSWriter`` does, uncompressed (``raw``: shuffle
"full", each batch's samples ranged GETs into many shards) and zstd-compressed
(``zstd``: shuffle "window", shards fetched whole), serves them as S3 objects
(``_files_s3``) behind a ``LatencyProxy`` that waits ``--latency-ms`` a request, and
reads one epoch (B=64, the default loader) on each side, in alternating order
(A B C D, D C B A, ...):

``store``       every epoch from the store
``cache-cold``  ``cache_dir`` empty: from the store, keeping what is read
``cache-warm``  ``cache_dir`` filled by an epoch before the trials: a later epoch
``local``       the same folder read locally: what a warm cache could reach

Reports samples/s (median of the trials) per side, the ratio to ``store``, GETs
through the proxy per epoch and each side's digest, which must be equal for a
dataset (``raw`` and ``zstd`` shuffle differently, so theirs differ).

Prediction (written before the first run): ``store`` waits a 50 ms round trip a
read; ``cache-warm`` reads local files (a 64 KiB block an entry for ``raw``, 8 MiB
pieces of whole shards for ``zstd``) with no GET of a shard, so it is 3x or more
``store`` for ``raw`` and 1.5x or more for ``zstd`` (whose window read-ahead already
hides most round trips), within 2x of ``local``; ``cache-cold`` within 0.8x of
``store`` (the writes are local).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from _files_s3 import files_s3, store_options
from _out import out
from object_cache import report_sides, run_sides

from headrace.emulate import LatencyProxy
from headrace.formats import MDSSource
from headrace.pipeline import Loader
from headrace.testing import batch_digest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from _mds_files import write_mds  # the tests' writer of Streaming's format

PER_SHARD, BATCH = 500, 64
COLUMNS = {"id": "int", "tokens": "ndarray:uint16"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=20_000)
    ap.add_argument("--latency-ms", type=float, default=50.0)
    ap.add_argument("--trials", type=int, default=3)
    a = ap.parse_args(argv)
    rng = np.random.default_rng(1)
    lengths = rng.integers(1_000, 2_001, a.samples)
    samples = [
        {"id": k, "tokens": rng.integers(0, 50_000, n, dtype=np.uint16)}
        for k, n in enumerate(lengths.tolist())
    ]
    steps = a.samples // BATCH
    ok = True
    with tempfile.TemporaryDirectory(prefix="headrace-mds-cache-") as tmp:
        root = Path(tmp)
        for codec in ("raw", "zstd"):
            write_mds(root / "data" / codec, COLUMNS, samples, per_shard=PER_SHARD,
                      compression=None if codec == "raw" else "zstd")  # fmt: skip
        with (
            files_s3(str(root / "data")) as endpoint,
            LatencyProxy(endpoint, latency_ms=a.latency_ms) as proxy,
        ):
            options = store_options(proxy.endpoint)
            for codec in ("raw", "zstd"):
                stored = sum(p.stat().st_size for p in (root / "data" / codec).iterdir())

                def make(side: str, trial: int, codec: str = codec) -> MDSSource:
                    if side == "local":
                        return MDSSource(root / "data" / codec)
                    kw: dict[str, Any] = {"store_options": options}
                    if side == "cache-cold":
                        kw["cache_dir"] = root / f"cold-{codec}-{trial}"
                    elif side == "cache-warm":
                        kw["cache_dir"] = root / f"warm-{codec}"
                    return MDSSource(f"s3://bench/{codec}", **kw)

                def cold(t: int, codec: str = codec) -> Path:
                    return root / f"cold-{codec}-{t}"

                runs = run_sides(make, lambda src: _epoch(src, steps), proxy, a.trials, cold)
                ok &= _report(codec, stored, a, runs)
    return 0 if ok else 1


def _report(codec: str, stored: int, a: argparse.Namespace, runs: dict[str, Any]) -> bool:
    out(
        f"{codec}: {a.samples:,} samples, {stored / 1e6:.1f} MB stored, {a.latency_ms:g} ms a "
        f"request, batch {BATCH}, {a.trials} trials (A B C D, D C B A, ...)"
    )
    return report_sides(runs)[1]


def _epoch(src: MDSSource, steps: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    with Loader(src, batch_size=BATCH, seed=1, steps=steps) as loader:
        digest = batch_digest(loader)
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "samples_per_s": steps * BATCH / seconds, "digest": digest}


if __name__ == "__main__":
    sys.exit(main())
