"""A few random rows of a cold local Arrow stream: the bytes brought in, A/B.

Run: PYTHONPATH=src python benchmarks/arrow_readahead.py [DIR]
Writes an Arrow IPC stream of 400 record batches (64 rows of 360 int32 token ids
and a label: ~93 KB a batch, 37 MB) once under DIR (default
/tmp/headrace-arrow-readahead), then alternates A (``TOUCHED_ONLY = False``:
pyarrow's read of the whole map, which advises WILLNEED, and the kernel's
read-around at every page fault) and B (the map advised MADV_RANDOM, read where
touched) over ROUNDS trials each. A trial evicts the file's pages
(POSIX_FADV_DONTNEED), opens the table, reads BATCHES batches of 32 random rows
(the same rows on both sides) and reports: the bytes read from storage
(/proc/self/io read_bytes) and resident after open and after the rows
(mincore), the open's seconds, rows/s, and the rows' digest.
Prediction (written before measuring): A brings in the whole file at open
(37 MB; read_ahead_kb 8192 here); B the headers (400 pages, ~2 MB) and about
a record batch per row read; rows/s within 2x either way (B pays a random
read per row, A one long read at open).
"""

from __future__ import annotations

import hashlib
import os
import statistics
import sys
import time

import numpy as np
from _out import out

import headrace.formats._arrow_local as arrow_local
from _cold import evict, read_bytes, resident
from headrace.formats import Ragged, Table

BATCHES_IN_FILE, ROWS, WIDTH = 400, 64, 360
BATCHES, B = 8, 32
ROUNDS = 4


def write(path: str) -> None:
    import pyarrow as pa

    rng = np.random.default_rng(0)
    schema = pa.schema([("ids", pa.list_(pa.int32())), ("label", pa.int64())])
    tmp = path + ".tmp"
    with pa.OSFile(tmp, "wb") as f, pa.ipc.new_stream(f, schema) as w:
        for b in range(BATCHES_IN_FILE):
            offs = pa.array(np.arange(ROWS + 1, dtype=np.int32) * WIDTH)
            ids = pa.array(rng.integers(0, 50_000, ROWS * WIDTH, dtype=np.int32))
            label = pa.array(np.arange(b * ROWS, (b + 1) * ROWS, dtype=np.int64))
            w.write_batch(pa.record_batch([pa.ListArray.from_arrays(offs, ids), label], schema))
    os.replace(tmp, path)


def trial(path: str, touched_only: bool) -> dict[str, float | str]:
    arrow_local.TOUCHED_ONLY = touched_only
    evict(path)
    rng = np.random.default_rng(1)
    h = hashlib.sha256()
    r0 = read_bytes()
    t0 = time.perf_counter()
    with Table.open(path) as tb:
        t1 = time.perf_counter()
        r1, opened = read_bytes(), resident(path)
        for _ in range(BATCHES):
            cols = tb.read_rows(rng.choice(tb.num_rows, B, replace=False))
            for name in sorted(cols):
                col = cols[name]
                for a in (col.values, col.offsets) if isinstance(col, Ragged) else (col,):
                    h.update(np.ascontiguousarray(a).tobytes())
        t2 = time.perf_counter()
    return {
        "open_read_MB": (r1 - r0) / 1e6,
        "open_resident_MB": opened / 1e6,
        "read_MB": (read_bytes() - r0) / 1e6,
        "resident_MB": resident(path) / 1e6,
        "open_ms": (t1 - t0) * 1e3,
        "rows_per_s": BATCHES * B / (t2 - t1),
        "digest": h.hexdigest()[:12],
    }


def main() -> None:
    root = sys.argv[1] if len(sys.argv) > 1 else "/tmp/headrace-arrow-readahead"
    os.makedirs(root, exist_ok=True)
    path = os.path.join(root, "data.arrow")
    if not os.path.exists(path):
        write(path)
    out(f"file: {os.path.getsize(path) / 1e6:.1f} MB, {BATCHES_IN_FILE} record batches")
    # The deep I/O pool starts on the first read of the process: not on A's first trial.
    with Table.open(path) as tb:
        tb.read_rows([0])
    runs: dict[str, list[dict[str, float | str]]] = {"A": [], "B": []}
    for r in range(ROUNDS):
        for side in "AB":
            got = trial(path, touched_only=side == "B")
            runs[side].append(got)
            out(r, side, {k: round(v, 2) if isinstance(v, float) else v for k, v in got.items()})
    arrow_local.TOUCHED_ONLY = True
    digests = {side: {str(t["digest"]) for t in ts} for side, ts in runs.items()}
    if len(digests["A"] | digests["B"]) != 1:
        raise SystemExit(f"digests differ: {digests}")
    keys = ("open_read_MB", "open_resident_MB", "read_MB", "resident_MB", "open_ms", "rows_per_s")
    for k in keys:
        a = statistics.median(float(t[k]) for t in runs["A"])
        b = statistics.median(float(t[k]) for t in runs["B"])
        out(f"{k}: A {a:.2f}  B {b:.2f}  B/A {b / a if a else float('nan'):.3f}")
    out("digest (both):", digests["A"].pop())


if __name__ == "__main__":
    main()
