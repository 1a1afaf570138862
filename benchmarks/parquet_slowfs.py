"""Local Parquet on a slow mount: a batch's row groups decoded at once vs one by one.

Writes a Parquet table (16,384 rows of 64-512 int32 ids and a label, row groups
of 1,024 rows, 2 files, about 12 MiB), mounts it through slowfs with
--read-latency-ms and --open-latency-ms, and reads --batches batches of 32 rows
with a Loader over TableSource (its default windowed shuffle), alternating
A (row groups decoded one by one: ``_DECODE_THREADS = 1``, how every release up
to this one read) and B (decoded at once, the default), A/B/A/B, each trial on
a fresh mount (cold: slowfs drops the page cache on open). Reports median
batches/s, the first batch's wait, the server's max READs in flight, and a
SHA-256 of every batch, which must be the same on both sides.

    PYTHONPATH=src python benchmarks/parquet_slowfs.py --latency-ms 20
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from _slowfs_ab import alternate, fuse_missing, median, mount, one_digest, parser, table

import headrace.formats._tables as tables
from headrace.formats import TableSource
from headrace.pipeline import Loader


def write(src: Path) -> None:
    rng = np.random.default_rng(0)
    lens = rng.integers(64, 512, 16384)
    offs = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    vals = rng.integers(0, 50000, int(offs[-1]), dtype=np.int32)
    t = pa.table(
        {
            "ids": pa.ListArray.from_arrays(pa.array(offs), pa.array(vals)),
            "label": pa.array(rng.integers(0, 10, 16384)),
        }
    )
    for i in range(2):
        pq.write_table(t.slice(i * 8192, 8192), src / f"part-{i}.parquet", row_group_size=1024)


def trial(src: Path, mnt: Path, args: argparse.Namespace, threads: int) -> dict[str, float | str]:
    tables._DECODE_THREADS = threads  # the pool is made per Table, at its first batch
    with mount(src, mnt, args) as m:
        h = hashlib.sha256()
        t0 = time.perf_counter()
        first = 0.0
        with Loader(TableSource(m.mnt, width=512), batch_size=32, steps=args.batches) as ld:
            for i, b in enumerate(ld):
                if i == 0:
                    first = time.perf_counter() - t0
                for k in sorted(b):
                    h.update(np.ascontiguousarray(b[k]).tobytes())
        elapsed = time.perf_counter() - t0
        s = m.stats()
    return {
        "bps": args.batches / elapsed,
        "first_s": first,
        "mif": s["max_in_flight"],
        "sha": h.hexdigest(),
    }


def main() -> int:
    ap = parser(__doc__, 48)
    args = ap.parse_args()
    if fuse_missing():
        return 0
    sides = {"one by one": 1, "at once": tables._DECODE_THREADS}
    with tempfile.TemporaryDirectory(prefix="parquet-slowfs-") as tmp:
        src = Path(tmp) / "src"
        src.mkdir()
        write(src)
        res = alternate(sides, args.rounds, lambda n: trial(src, Path(tmp) / "mnt", args, n))
    digest = one_digest(res)
    if digest is None:
        return 1
    table(
        ["READ latency", "decode", "batches/s", "first batch", "max READs in flight"],
        (
            [f"{args.latency_ms:g} ms", name, f"{median(xs, 'bps'):.1f}",
             f"{median(xs, 'first_s'):.2f} s", max(int(x["mif"]) for x in xs)]
            for name, xs in res.items()
        ),
    )  # fmt: skip
    print(f"digest (both sides): {digest[:16]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
