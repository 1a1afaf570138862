"""Opening a multi-file table on a slow mount: files one after another vs side by side.

Opening a table file is a chain of round trips: the open, its first bytes,
then a Parquet footer, or every record batch header of an Arrow stream (a
stream has no footer). Side A opens the files one after another (a pool of
one thread: how every release up to this one opened them), side B side by
side on the deep I/O pool (the default). Writes 8 shards of 33,000 rows (16-64
int32 ids and a label) as a save_to_disk folder (Arrow streams, record batches
of 1,000 rows) and as 8 Parquet files (row groups of 4,000), then opens each
on a fresh slowfs mount per trial, A/B/A/B, and reports median open seconds
and the server's max READs in flight. Both sides must see the same rows.

    PYTHONPATH=src python benchmarks/tables_open_slowfs.py --latency-ms 20

Prediction, written before the first run (20 ms READs, 30 ms opens): an
Arrow shard is 33 headers, ~0.7 s; 8 one after another ~5.5 s, side by side
~0.7 s (8x). A Parquet file is ~2 opens and 2 READs, ~0.1 s; 8 take 0.8 vs
~0.15 s (5x).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from _slowfs_ab import alternate, fuse_missing, median, mount, one_digest, parser, table

import headrace.formats._table_part as part
from headrace.formats import Table

SHARDS, ROWS = 8, 33_000


def write(src: Path) -> None:
    rng = np.random.default_rng(0)
    n = SHARDS * ROWS
    lens = rng.integers(16, 64, n)
    offs = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    ids = rng.integers(0, 50_000, int(offs[-1]), dtype=np.int32)
    t = pa.table(
        {
            "ids": pa.ListArray.from_arrays(pa.array(offs), pa.array(ids)),
            "label": pa.array(rng.integers(0, 10, n)),
        }
    )
    (src / "arrow").mkdir()
    (src / "parquet").mkdir()
    names = [f"data-{i:05d}-of-{SHARDS:05d}.arrow" for i in range(SHARDS)]
    for i, name in enumerate(names):
        part = t.slice(i * ROWS, ROWS)
        with pa.OSFile(str(src / "arrow" / name), "wb") as f, pa.ipc.new_stream(f, t.schema) as w:
            w.write_table(part, max_chunksize=1000)
        pq.write_table(part, src / "parquet" / f"part-{i}.parquet", row_group_size=4000)
    state = {"_data_files": [{"filename": n} for n in names]}
    (src / "arrow" / "state.json").write_text(json.dumps(state))


def trial(root: Path, mnt: Path, args: argparse.Namespace, one: bool) -> dict[str, Any]:
    real = part.deep_io_pool
    single = ThreadPoolExecutor(1)
    if one:
        part.deep_io_pool = lambda: single  # type: ignore[assignment]
    try:
        with mount(root, mnt, args) as m:
            t0 = time.perf_counter()
            tb = Table.open(m.mnt)
            took = time.perf_counter() - t0
            rows = tb.num_rows
            tb.close()
            mif = int(m.stats()["max_in_flight"])
    finally:
        part.deep_io_pool = real
        single.shutdown()
    return {"open_s": took, "mif": mif, "rows": rows}


def main() -> int:
    ap = parser(__doc__)
    args = ap.parse_args()
    if fuse_missing():
        return 0
    rows = []
    with tempfile.TemporaryDirectory(prefix="tables-open-slowfs-") as tmp:
        src = Path(tmp) / "src"
        src.mkdir()
        write(src)
        mnt = Path(tmp) / "mnt"
        for fmt in ("arrow", "parquet"):
            sides = {"one by one": True, "side by side": False}
            res = alternate(sides, args.rounds, lambda o, r=src / fmt: trial(r, mnt, args, o))
            if one_digest(res, key="rows") is None:  # the same rows on both sides
                return 1
            rows += [
                [fmt, side, f"{median(rs, 'open_s'):.2f}", max(r["mif"] for r in rs)]
                for side, rs in res.items()
            ]
    table(["format", "side", "open s", "max READs in flight"], rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
