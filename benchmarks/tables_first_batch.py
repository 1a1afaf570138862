"""A table's first batch through a Loader: how soon it comes, and what it waits for.

Run: PYTHONPATH=src python benchmarks/tables_first_batch.py [--rounds 7] [DIR]

Writes a local Arrow table (``save_to_disk`` layout, 1,000-row record batches) and a
Parquet file (10,000-row groups) of 200,000 rows (token lists and a bool) once under
DIR (default /tmp/headrace-tables-first-batch-2). Each trial is a fresh Python
process (numpy, pyarrow and headrace imported before the clock starts), sides
alternating:

  to_numpy   columns turned into arrays by pyarrow's ``Array.to_numpy`` (what the
             table reader did until 2026-12-03): its first call imports pandas
             where installed
  bools      numbers viewed from the Arrow buffers, bools and validity bitmaps
             still by ``to_numpy`` (and nulls by ``fill_null``): until 2026-12-03 pm
  buffers    numbers viewed, bools and bitmaps unpacked from the buffers (now)

Printed per side and format: seconds from building the Loader to its first batch
(median, min-max), the seconds spent starting threads (``Thread.start``) and the
threads started by then, by pool; whether pandas was imported; the SHA-256 of the
first 16 batches (the same on both sides).

Prediction (written before measuring): to_numpy ~0.2 s to the first batch, threads
started in under 10 ms of it (a few %, the pools start threads on demand: about
ten deep-pool threads, not 64), the rest the pandas import; buffers ~0.02 s.
With the bool column (2026-12-03 pm): to_numpy and bools both ~0.19 s (pandas
imported 7/7 each), buffers 0.02-0.035 s (0/7); digests equal on all three.
Measured (7 rounds, 2c shared with three busy helpers, 2026-12-03: absolute times
~6x the morning's, ratios hold): Arrow to_numpy 1.700 s, bools 1.372 s, buffers
0.122 s (bools/buffers 11.3x); Parquet 1.830 / 2.038 / 0.203 s (10.1x); pandas
imported 7/7, 7/7, 0/7; sha256 equal across the three sides (5e76afa3c752...,
98430a3da5a5...).
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import statistics
import subprocess
import sys
import threading
import time

import numpy as np
from _out import out

ROWS, SIDES, KINDS = 200_000, ("to_numpy", "bools", "buffers"), ("arrow", "parquet")


def write(root: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    lens = rng.integers(1, 64, ROWS)
    offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    ids = rng.integers(0, 50_000, int(offsets[-1]), dtype=np.int32)
    t = pa.table(
        {
            "input_ids": pa.ListArray.from_arrays(pa.array(offsets), pa.array(ids)),
            "keep": pa.array(rng.random(ROWS) < 0.5),
        }
    )
    arrow = os.path.join(root, "arrow")
    os.makedirs(arrow, exist_ok=True)
    name = "data-00000-of-00001.arrow"
    with pa.OSFile(os.path.join(arrow, name), "wb") as f, pa.ipc.new_stream(f, t.schema) as w:
        w.write_table(t, max_chunksize=1000)
    with open(os.path.join(arrow, "state.json"), "w") as f:
        json.dump({"_data_files": [{"filename": name}]}, f)
    with open(os.path.join(arrow, "dataset_info.json"), "w") as f:
        json.dump({}, f)
    os.makedirs(os.path.join(root, "parquet"), exist_ok=True)
    pq.write_table(t, os.path.join(root, "parquet", "a.parquet"), row_group_size=10_000)


def child(side: str, path: str) -> None:
    import pyarrow  # noqa: F401  (imports are not the first batch's)

    from headrace.formats import TableSource, _arrow_numpy, _table_gather, _table_nulls
    from headrace.pipeline import Loader

    def to_numpy(arr, *, zero_copy_only=False):  # type: ignore[no-untyped-def]
        return np.asarray(arr.to_numpy(zero_copy_only=zero_copy_only))

    def valid_rows(arr):  # type: ignore[no-untyped-def]
        return to_numpy(arr.is_valid())

    def zero_filled(arr):  # type: ignore[no-untyped-def]
        return numbers(arr.fill_null(False if str(arr.type) == "bool" else 0))

    def bools(arr, *, zero_copy_only=False):  # type: ignore[no-untyped-def]
        if str(arr.type) == "bool":
            return to_numpy(arr, zero_copy_only=zero_copy_only)
        return _arrow_numpy.numbers(arr, zero_copy_only=zero_copy_only)

    if side != "buffers":
        numbers = to_numpy if side == "to_numpy" else bools
        for mod in (_table_gather, _table_nulls):
            for name, fn in (("numbers", numbers), ("valid_rows", valid_rows)):
                setattr(mod, name, fn)
        _table_gather.zero_filled = zero_filled
    start, spent, started = threading.Thread.start, [0.0], collections.Counter[str]()

    def timed_start(self: threading.Thread) -> None:
        t = time.perf_counter()
        start(self)
        spent[0] += time.perf_counter() - t
        started[self.name.rsplit("_", 1)[0]] += 1

    threading.Thread.start = timed_start  # type: ignore[method-assign]
    t0 = time.perf_counter()
    h = hashlib.sha256()
    source = TableSource(path, columns=["input_ids", "keep"], width=65)
    with Loader(source, batch_size=32, seed=0) as ld:
        for i, b in zip(range(16), ld, strict=False):
            if i == 0:
                first, threads = time.perf_counter() - t0, dict(started)
                spent_first, pandas = spent[0], "pandas" in sys.modules
            for k in sorted(b):
                h.update(np.ascontiguousarray(b[k]).tobytes())
    print(
        json.dumps(
            {
                "first_s": first,
                "thread_start_s": spent_first,
                "threads": threads,
                "pandas": pandas,
                "sha": h.hexdigest(),
            }
        )
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("dir", nargs="?", default="/tmp/headrace-tables-first-batch-2")
    args = ap.parse_args()
    if not os.path.exists(os.path.join(args.dir, "parquet", "a.parquet")):
        write(args.dir)
    runs: dict[tuple[str, str], list[dict]] = {(k, s): [] for k in KINDS for s in SIDES}
    for _ in range(args.rounds):
        for kind in KINDS:
            for side in SIDES:  # A/B/A/B, each a fresh process
                cmd = [sys.executable, __file__, "--child", side, os.path.join(args.dir, kind)]
                res = subprocess.run(cmd, capture_output=True, text=True, check=True)
                runs[kind, side].append(json.loads(res.stdout))
    for kind in KINDS:
        medians = {}
        for side in SIDES:
            rs = runs[kind, side]
            firsts = [r["first_s"] for r in rs]
            medians[side] = statistics.median(firsts)
            shas = {r["sha"] for r in rs}
            out(
                f"{kind:8} {side:9} first batch {medians[side]:.3f} s "
                f"({min(firsts):.3f}-{max(firsts):.3f}), thread starts "
                f"{statistics.median(r['thread_start_s'] for r in rs):.4f} s, "
                f"threads {rs[-1]['threads']}, pandas imported "
                f"{sum(r['pandas'] for r in rs)}/{len(rs)}, sha256 {'/'.join(shas)[:16]}"
                + ("" if len(shas) == 1 else " DIFFERS between trials")
            )
        same = {r["sha"] for s in SIDES for r in runs[kind, s]}
        out(
            f"{kind:8} to_numpy/buffers {medians['to_numpy'] / medians['buffers']:.1f}x, "
            f"bools/buffers {medians['bools'] / medians['buffers']:.1f}x, "
            f"digests {'equal' if len(same) == 1 else 'DIFFER'}"
        )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3])
    else:
        main()
