"""Random rows of a large token-list table: each batch touches as many record batches as
it has rows, so the gather's cost a record batch decides the batch's.

Run: PYTHONPATH=src python benchmarks/table_random_rows.py [--rows 200000] [--batches 400]

Writes a ``save_to_disk`` folder under /tmp (4 shards of 1,000-row record batches:
``input_ids``, 64-511 int32 ids a row, and ``label``), reads 400 batches of B=32 random
rows once (views made, pages mapped), then times the same batches again
(``TableSource(..., width=512, shuffle="full").read``), printing ms a batch and the
digest of the padded ids. Compare two commits by running it under each (a ``git
worktree`` of the other, ``PYTHONPATH=<worktree>/src``), alternating.

Measured (2c, 2026-12-05, A = 5f72ecc7, B = 5833a7d3, A/B x 3): A 1.008, 0.907, 0.912
ms a batch; B 0.638, 0.667, 0.724 (median 0.912 against 0.667: 1.37x); digest
a1606921d4bf on both sides. B copies a record batch's few rows (at most 16) as slices
and takes their offsets a row at a time, where A built index arrays for each record
batch (~14 us, and ~4 us more for the offsets).

Then the full shuffle's permutation of a batch's 32 samples (a Feistel network, its
out-of-range values walked again): predicted ~110 us a batch saved (0.667 -> ~0.55) by
walking the last few entries through the network on Python ints instead of another
vectorised pass (~50 us each, ~2.4 a batch). Walking all 32 in Python first missed
(0.616-0.642: 4.4 us an entry with its walks, not 3); a vectorised first pass with the
last 12 or fewer walked in Python met it: the permutation of 32 went from 186-195 us
to 95-104 (A/B x 3), and the batch (A = 5f72ecc7, B = this change, A/B x 3) from 0.896,
0.898, 0.911 ms to 0.575, 0.559, 0.555 (1.6x in all), digest a1606921d4bf both sides.
"""

from __future__ import annotations

import argparse
import hashlib
import time
from pathlib import Path

import numpy as np
from _out import out


def write(path: Path, rows: int) -> Path:
    import datasets
    import pyarrow as pa

    if not path.exists():
        rng = np.random.default_rng(0)
        lens = rng.integers(64, 512, rows)
        off = np.zeros(rows + 1, np.int32)
        np.cumsum(lens, out=off[1:])
        ids = pa.ListArray.from_arrays(off, rng.integers(0, 50_000, int(off[-1]), dtype=np.int32))
        table = pa.table({"input_ids": ids, "label": np.arange(rows)})
        datasets.Dataset(table).save_to_disk(str(path), num_shards=4)
    for f in path.glob("*.arrow"):
        f.read_bytes()  # the page cache warm
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--batches", type=int, default=400)
    a = ap.parse_args()
    from headrace.formats import TableSource

    path = write(Path(f"/tmp/headrace-random-rows-{a.rows}"), a.rows)
    src = TableSource(path, columns=["input_ids", "label"], width=512, shuffle="full")
    rng = np.random.default_rng(1)
    batches = [rng.choice(a.rows, 32, replace=False) for _ in range(a.batches)]
    for idx in batches:
        src.read(0, idx)
    h = hashlib.sha256()
    spent = []
    for idx in batches:
        t0 = time.perf_counter()
        b = src.read(0, idx)
        spent.append(time.perf_counter() - t0)
        h.update(b["input_ids"].data)
    out(f"{float(np.mean(spent)) * 1e3:.3f} ms a batch, digest {h.hexdigest()[:12]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
