"""Random records from ArrayRecord files: headrace's ``format="array_record"`` (no
array_record at run time) against array_record's own ``ArrayRecordReader.read(indices)``
(C++, opened as Grain's ``ArrayRecordDataSource`` opens it: ``readahead_buffer_size:0``,
a 32 KiB file buffer), the same records in the same order.

Data: 4 files of 5,000 records of 1 KiB (512 uint16 ids drawn from 1,000: zstd halves
them), written by ``ArrayRecordWriter`` with ``group_size:1`` and ``group_size:64``
(zstd:3, the default), local, in the page cache. A trial reads 16 batches of 256
records (4,096 of the 20,000): headrace through a sync Loader (``prefetch=0``,
``shuffle="samples"``, ``decode=False``); array_record reads the indices of the same
batches (headrace's order, taken once before), file by file, one ``read`` a file a
batch. Sides alternate (A/B/A/B) in one process, 5 trials, medians. Digest: SHA-256 of
the records' bytes in batch order, which both sides must share. Bytes read a record:
the change of this process's ``rchar`` (/proc/self/io: bytes through read syscalls,
``pread`` included; page-cache hits count) over the records read.

Prediction (written before the first run): group_size:1: both read ~0.6 KiB chunks,
but headrace joins reads within 64 KiB of each other (its coalescing of neighbours:
256 random records of ~12 MB a batch are ~45 KiB apart), so it reads 20-40 KiB a record
to array_record's 1-33 KiB (its 32 KiB buffer); headrace parses each chunk in Python
(~30-50 us a record): 15-30k records/s, array_record's C++ 5-20x that.
group_size:64: each record costs its 64-record chunk (~35 KiB zstd, 64 KiB
decompressed) on both sides: ~170 chunks a batch of 256, ~25 KiB read a record on
both; decompression dominates, headrace decodes a chunk once a batch however many of
its records the batch asks: array_record 1.5-4x faster.

Measured (2c, 2026-12-04; records/s medians of 5, B read a record; one digest,
3a1e832c439a, on all four sides). First run: headrace g1 492/s, read whole files:
``decode=False`` turned reads by records off (a file's bytes, for other formats), so
each batch decoded every chunk of every file it touched; records' bytes are samples
of record formats, and are now read by chunks. Second run:
  headrace g1        9,182/s  10,980 B   array_record g1    48,907/s  17,396 B  (5.3x)
  headrace g64      14,520/s  12,976 B   array_record g64   18,794/s  34,486 B  (1.3x)
group_size:1 as predicted (5.3x, in 5-20x); headrace read fewer bytes than predicted
(11 KB, not 20-40 KiB: the loader reads up to 4 batches at once, so more of its records
share a read). group_size:64: 1.3x, under the 1.5-4x predicted, and headrace read
0.4x array_record's bytes: a read of several batches decodes a chunk once for all
the records they ask of it, where ``read(indices)`` here is one call a batch.
Third run, after a zstd decompressor kept a thread (making one cost 15 us a chunk) and
small chunks' record sizes parsed in Python (NumPy's passes cost 15 us a chunk):
  headrace g1       25,007/s  10,980 B   array_record g1   110,864/s  17,396 B  (4.4x)
  headrace g64      22,764/s  12,976 B   array_record g64   32,990/s  34,486 B  (1.45x)
(the machine less loaded than in the second run: array_record's rates rose too; the
ratios are what compares).

Run: PYTHONPATH=src python benchmarks/array_record_ab.py [--trials 5]
(Not ``array_record.py``: a script of that name would shadow the package it imports.)
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from _out import out

from headrace.formats import FileSource
from headrace.pipeline import Loader

FILES, PER_FILE, WIDTH, BATCH, STEPS = 4, 5_000, 512, 256, 16
GROUPS = (1, 64)


def rchar() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise RuntimeError("no rchar in /proc/self/io")


def write(root: Path, group: int) -> None:
    from array_record.python.array_record_module import ArrayRecordWriter

    root.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for f in range(FILES):
        w = ArrayRecordWriter(str(root / f"part-{f}.array_record"), f"group_size:{group}")
        for _ in range(PER_FILE):
            w.write(rng.integers(0, 1000, WIDTH, dtype=np.uint16).tobytes())
        w.close()


def headrace(root: Path) -> tuple[float, str, list[np.ndarray], int]:
    """Seconds, digest, each batch's sample indexes, bytes read."""
    src = FileSource(root, format="array_record", shuffle="samples", decode=False)
    h = hashlib.sha256()
    order = []
    r0 = rchar()
    t = time.perf_counter()
    with Loader(src, batch_size=BATCH, seed=3, steps=STEPS, prefetch=0) as ld:
        for b in ld:
            h.update(np.ascontiguousarray(b["bytes"]).tobytes())
            order.append(b["index"])
    s = time.perf_counter() - t
    n = rchar() - r0
    src.close()
    return s, h.hexdigest(), order, n


def array_record(root: Path, order: list[np.ndarray]) -> tuple[float, str, int]:
    from array_record.python.array_record_module import ArrayRecordReader

    h = hashlib.sha256()
    r0 = rchar()
    t = time.perf_counter()
    readers = [
        ArrayRecordReader(
            str(root / f"part-{f}.array_record"),
            "readahead_buffer_size:0",
            file_reader_buffer_size=32768,
        )
        for f in range(FILES)
    ]
    for idx in order:
        files, rows = np.divmod(idx, PER_FILE)
        got: list[bytes] = [b""] * len(idx)
        for f in np.unique(files).tolist():
            at = np.flatnonzero(files == f)
            for k, rec in zip(at.tolist(), readers[f].read(rows[at].tolist()), strict=True):
                got[k] = rec
        h.update(b"".join(got))
    for r in readers:
        r.close()
    s = time.perf_counter() - t
    return s, h.hexdigest(), rchar() - r0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=5)
    args = ap.parse_args()
    n = BATCH * STEPS
    with tempfile.TemporaryDirectory() as tmp:
        roots = {g: Path(tmp) / f"g{g}" for g in GROUPS}
        for g, root in roots.items():
            write(root, g)
            size = sum(p.stat().st_size for p in root.iterdir())
            out(f"group_size:{g}: {FILES} files, {size:,} bytes")
        orders = {g: headrace(roots[g])[2] for g in GROUPS}  # warm: page cache, imports
        rates: dict[str, list[float]] = {}
        reads: dict[str, list[float]] = {}
        digests: dict[str, set[str]] = {}
        for _ in range(args.trials):
            for g in GROUPS:
                s, d, _, nb = headrace(roots[g])
                for side, (sec, dig, nbytes) in (
                    (f"headrace g{g}", (s, d, nb)),
                    (f"array_record g{g}", array_record(roots[g], orders[g])),
                ):
                    rates.setdefault(side, []).append(n / sec)
                    reads.setdefault(side, []).append(nbytes / n)
                    digests.setdefault(side, set()).add(dig[:12])
        out(f"{'side':<18} {'median records/s':>17}  {'per trial':<32} B read/record  digest")
        for side, r in rates.items():
            shown = " ".join(f"{x:,.0f}" for x in r)
            out(
                f"{side:<18} {statistics.median(r):>17,.0f}  {shown:<32} "
                f"{statistics.median(reads[side]):>13,.0f}  {','.join(sorted(digests[side]))}"
            )
        for g in GROUPS:
            a = statistics.median(rates[f"array_record g{g}"])
            b = statistics.median(rates[f"headrace g{g}"])
            out(f"group_size:{g}: array_record / headrace {a / b:.2f}x")


if __name__ == "__main__":
    main()
