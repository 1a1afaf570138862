"""What reading zstd-compressed MDS shards costs ``MDSSource``, against the same dataset
uncompressed: 40,000 samples (``tokens``: 200-800 uint16 ids drawn Zipf-like, ``id``:
``int``) in shards of 200 (200 shards, about 200 KB each decompressed), local files in
the page cache, B=256, sync loader (``prefetch=0``), A/B/A/B in one process, medians.

Sides (the two "window" sides read the same batches, so do the two "full" ones):
  zstd window   compressed, shuffle="window", window_rows=8,000 (40 shards a window)
  raw window    uncompressed, the same windows
  raw full      uncompressed, shuffle="full"
  zstd full     compressed, shuffle="full", shard_cache_bytes of 4 shards: the thrash

Prediction (before the first run): a window decompresses each shard once an epoch
(~50 MB of zstd at ~1 GB/s: ~0.05 s an epoch of 156 batches) and then slices memory
instead of 256 preads a batch, so zstd window runs at 0.8-1.3x raw window's
batches/s, reading the compressed bytes once (about 0.6x the raw). raw window and raw
full are within 1.3x of each other (the page cache serves both). The full shuffle over
compressed shards with a cache of 4 shards decompresses most of the 20 shards every
batch: about 60-100 KB decompressed a sample of ~1 KB, 10-30x fewer batches/s than raw
full.

That first run had 20 shards of 2,000: the loader reads up to 1,024 samples at once
(4 batches), so a read decompressed the 20 shards once for 1,024 samples (7.5 KB a
sample, 1.9x). A dataset of many shards is what a full shuffle meets: revised to 200
shards of 200 before the second run, predicted: a read of 1,024 samples touches ~200
shards, ~40 KB decompressed a sample, 5-20x fewer batches/s than raw full; the other
sides as above. Measured 8.7 KB a sample: the loader's reads grow to 8,192 samples
(read-ahead), so each read decompressed the 200 shards once (200 x 204 KB / 8,192).
Such a read then held every shard it touched; since then a read takes compressed shards
in groups that fit the cache. Third run: the same figures predicted, 5 trials (the
second's trials spread 2-3x: other jobs on the machine).

Run: PYTHONPATH=src python benchmarks/mds_zstd.py [--trials 5] [--steps 156]
(156 steps: an epoch, so each window side decompresses or reads every shard once).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from _out import out
from _timed import seconds_per_step

from headrace.formats import MDSSource

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from _mds_files import write_mds  # the tests' writer of Streaming's format

SAMPLES, PER_SHARD, BATCH, WINDOW = 40_000, 200, 256, 8_000
SIDES = ("zstd window", "raw window", "raw full", "zstd full")


def source(roots: dict[str, Path], side: str) -> MDSSource:
    codec, shuffle = side.split()
    kw: dict[str, Any] = {"shuffle": shuffle, "window_rows": WINDOW}
    if side == "zstd full":
        # Four shards' worth: the warning says it thrashes, which is what is measured.
        kw["shard_cache_bytes"] = 4 * (roots["raw"] / "shard.00000.mds").stat().st_size
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return MDSSource(roots[codec], **kw)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--steps", type=int, default=156)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    ids = np.minimum(rng.zipf(1.3, SAMPLES * 800), 50_000).astype(np.uint16)
    lengths = rng.integers(200, 801, SAMPLES)
    starts = np.concatenate([[0], np.cumsum(lengths)])
    samples = [{"tokens": ids[starts[k] : starts[k + 1]], "id": k} for k in range(SAMPLES)]
    with tempfile.TemporaryDirectory() as tmp:
        roots = {"raw": Path(tmp) / "raw", "zstd": Path(tmp) / "zstd"}
        columns = {"tokens": "ndarray:uint16", "id": "int"}
        write_mds(roots["raw"], columns, samples, per_shard=PER_SHARD)
        write_mds(roots["zstd"], columns, samples, per_shard=PER_SHARD, compression="zstd")
        sizes = {k: sum(p.stat().st_size for p in r.glob("shard.*")) for k, r in roots.items()}
        out(f"shards: raw {sizes['raw']:,} bytes, zstd {sizes['zstd']:,} bytes")
        for side in SIDES:
            seconds_per_step(source(roots, side), 5, batch_size=BATCH)  # page cache warm
        times: dict[str, list[float]] = {s: [] for s in SIDES}
        digests: dict[str, set[str]] = {s: set() for s in SIDES}
        read: dict[str, float] = {}
        unzipped: dict[str, float] = {}
        for _ in range(args.trials):
            for side in SIDES:
                src = source(roots, side)
                s, d = seconds_per_step(src, args.steps, batch_size=BATCH)
                times[side].append(1 / s)
                digests[side].add(d)
                st, n = src.stats, args.steps * BATCH
                read[side] = (st.zip_bytes if side.startswith("zstd") else st.bytes) / n
                unzipped[side] = st.unzipped_bytes / n
        out("side          median batches/s   per trial         read B/sample  "
            "decompressed B/sample  digest")  # fmt: skip
        for side in SIDES:
            shown = " ".join(f"{t:.1f}" for t in times[side])
            out(
                f"{side:<13} {statistics.median(times[side]):>16.1f}   {shown:<16}  "
                f"{read[side]:>13,.0f}  {unzipped[side]:>21,.0f}  "
                f"{','.join(sorted(d[:12] for d in digests[side]))}"
            )
        med = {s: statistics.median(times[s]) for s in SIDES}
        out(
            f"ratios: zstd window / raw window {med['zstd window'] / med['raw window']:.2f}x, "
            f"raw window / raw full {med['raw window'] / med['raw full']:.2f}x, "
            f"raw full / zstd full {med['raw full'] / med['zstd full']:.1f}x"
        )


if __name__ == "__main__":
    main()
