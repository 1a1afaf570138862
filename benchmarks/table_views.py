"""Strings held as views (polars' IPC files) against plain strings: what the cast costs.

Run: PYTHONPATH=src python benchmarks/table_views.py [--rows 200000] [--batches 300] [--trials 5]

Writes one local Arrow IPC file per side under /tmp (the same text, ~40 bytes a row,
in record batches of --group rows): ``string`` (``large_string``) and ``string_view``.
A TableSource reads B=32 rows a batch (width 64) under the full and the windowed
shuffle; trials alternate sides (A B A B ...), each a fresh source, and the first
batch is timed apart. A view column is read through pyarrow's cast to
``large_string``: a copy of the record batch's column when its views are built, once
per record batch while it stays in the source's cache.

Prediction (written before measuring): the windowed shuffle reads each record batch
once, so views cost one cast per batch, ~1.1-1.3x plain per batch read; the full
shuffle with 1,000-row record batches touches a new record batch for almost every
row, ~2-3x plain. Digests equal.

Measured (5 trials, 2c, 2026-12-04, 200,000 rows in 1,000-row record batches, 300
batches): window 931 vs 1,005 us a batch (0.93x), full 1,311 vs 1,222 us (1.07x);
first batch 2.6 vs 3.1 ms and 7.5 vs 9.4 ms; sha256 c1176be082dd (window) and
f8daf444d683 (full) on both sides. The prediction missed because a source keeps
the views of every record batch it touched (all 200 here): each is cast once a
trial, 0.1 ms for 1,000 rows, 20 ms over 300 batches (~7%), not once a read. What a
batch costs on both sides is the gather and plan of 32 rows over ~32 record
batches in Python.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
from _out import out

from headrace.formats import TableSource


def write(path: Path, rows: int, group: int, typ: pa.DataType) -> Path:
    if path.exists():
        return path
    rng = np.random.default_rng(0)
    words = [f"w{i:05d}" for i in range(5000)]
    text = [" ".join(rng.choice(words, 6)) for _ in range(rows)]
    table = pa.table({"i": np.arange(rows), "text": pa.array(text, typ)})
    with ipc.new_file(path, table.schema) as w:
        w.write_table(table, max_chunksize=group)
    return path


def trial(path: Path, shuffle: str, batches: int) -> tuple[float, float, str]:
    """(first batch s, us a batch after it, digest) of one fresh source."""
    src = TableSource(str(path), columns=["text"], width=64, shuffle=shuffle)  # type: ignore[arg-type]
    h = hashlib.sha256()
    t0 = time.perf_counter()
    first = src.read(0, np.arange(32, dtype=np.int64))
    t1 = time.perf_counter()
    h.update(first["text"].tobytes())
    for b in range(1, batches):
        got = src.read(0, np.arange(b * 32, (b + 1) * 32, dtype=np.int64))
        h.update(got["text"].tobytes())
    t2 = time.perf_counter()
    src.close()
    return t1 - t0, (t2 - t1) / (batches - 1) * 1e6, h.hexdigest()[:12]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--group", type=int, default=1000)
    ap.add_argument("--batches", type=int, default=300)
    ap.add_argument("--trials", type=int, default=5)
    a = ap.parse_args()
    files = {
        "string": write(Path(f"/tmp/headrace-views-{a.rows}-{a.group}-s.arrow"), a.rows, a.group,
                        pa.large_string()),
        "view": write(Path(f"/tmp/headrace-views-{a.rows}-{a.group}-v.arrow"), a.rows, a.group,
                      pa.string_view()),
    }  # fmt: skip
    out(f"{a.rows:,} rows in record batches of {a.group:,}; B=32, {a.batches} batches a trial")
    out("| shuffle | side | first batch ms | us a batch (min-max) | ratio | sha256 |")
    out("|---|---|---|---|---|---|")
    for shuffle in ("window", "full"):
        res: dict[str, list[tuple[float, float, str]]] = {s: [] for s in files}
        for t in range(a.trials):
            for side in list(files) if t % 2 == 0 else list(files)[::-1]:
                res[side].append(trial(files[side], shuffle, a.batches))
        base = statistics.median(r[1] for r in res["string"])
        for side, rs in res.items():
            per = [r[1] for r in rs]
            med = statistics.median(per)
            out(
                f"| {shuffle} | {side} | {statistics.median(r[0] for r in rs) * 1e3:.1f} | "
                f"{med:,.0f} ({min(per):,.0f}-{max(per):,.0f}) | {med / base:.2f}x | "
                f"{','.join(sorted({r[2] for r in rs}))} |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
