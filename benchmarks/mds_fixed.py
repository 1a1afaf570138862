"""What decoding a batch at once saves ``MDSSource`` where every column read is a number
or a fixed-shape array read narrow (``_fixed_batch``), against the decode a sample that
every other column takes: 20,000 samples in shards of 2,000, columns ``emb``
(``ndarray:float32:64``), ``label`` (``int``) and ``score`` (``float32``) read, ``text``
(``str``) left in the shards; B=256, sync loader (``prefetch=0``), local files in the
page cache, A/B/A/B in one process, medians of the trials.

Prediction (before the first run): the reads (256 ranges of 268 bytes, coalesced) cost
the same on both sides; the decode a sample costs ~3 us a column a sample (~2.5 ms a
batch) against ~0.1 ms at once: 2-4x less time a batch.

Run: PYTHONPATH=src python benchmarks/mds_fixed.py [--trials 4] [--steps 60]
Both sides read the same batches: their SHA-256 digests are printed and must be equal.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np
from _out import out
from _timed import seconds_per_step

from headrace.formats import MDSSource

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from _mds_files import write_mds  # the tests' writer of Streaming's format

SAMPLES, PER_SHARD, BATCH = 20_000, 2_000, 256
COLUMNS = ["emb", "label", "score"]


def trial(root: Path, steps: int, vector: bool) -> tuple[float, str]:
    src = MDSSource(root, columns=COLUMNS)
    assert src._vector  # the path under test is taken where allowed
    src._vector = vector
    return seconds_per_step(src, steps, batch_size=BATCH)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=4)
    ap.add_argument("--steps", type=int, default=60)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    samples = [
        {"emb": rng.standard_normal(64).astype(np.float32), "label": k % 1000,
         "score": k / 7, "text": "t" * (k % 50)}
        for k in range(SAMPLES)
    ]  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        columns = {"emb": "ndarray:float32:64", "label": "int", "score": "float32", "text": "str"}
        write_mds(root, columns, samples, per_shard=PER_SHARD)
        trial(root, 10, True)  # warm the page cache
        times: dict[bool, list[float]] = {False: [], True: []}
        digests: dict[bool, set[str]] = {False: set(), True: set()}
        for _ in range(args.trials):
            for vector in (False, True):
                s, d = trial(root, args.steps, vector)
                times[vector].append(s * 1e6)
                digests[vector].add(d)
        out("side              median us/batch   per trial (us)              digest")
        for vector in (False, True):
            shown = " ".join(f"{t:.0f}" for t in times[vector])
            side = "a batch at once" if vector else "a sample each"
            out(
                f"{side:<17} {statistics.median(times[vector]):>15.0f}   {shown:<26}  "
                f"{','.join(sorted(d[:12] for d in digests[vector]))}"
            )
        ratio = statistics.median(times[False]) / statistics.median(times[True])
        out(f"ratio (a sample each / a batch at once): {ratio:.2f}x")


if __name__ == "__main__":
    main()
