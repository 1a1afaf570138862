"""Opening a Parquet table given as a list of object URLs (moto behind a latency proxy).

    PYTHONPATH=src python benchmarks/tables_open_s3.py [--files 64] [--latency-ms 50]
        [--rounds 3] [--root DIR]

``--files`` small Parquet shards (100 rows each) are written once under
``--root``, uploaded to a moto server started for the run and reached through
a ``LatencyProxy`` of ``--latency-ms``. Two sides, alternating, ``--rounds``
each:

``heads-serial``  what opening a URL list did before: one HEAD per URL, one
                  after another (``ObjectFiles.info``), then ``Table.open`` on the
                  same list (which HEADs again, all in flight: its own cost).
``table-open``    ``Table.open(urls)``: the HEADs on the request queue, up to
                  ``in_flight`` (64) at once, then every footer at once.

The first side's time minus the second's is the serial HEADs' cost. Both tables
must hold the same rows (checked: row count and a digest of the labels).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from _out import out as _out

from headrace.bench._s3_serve import bench_s3
from headrace.formats import Table
from headrace.formats._object_files import ObjectFiles

URL = "s3://headrace-bench/shards"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=64)
    ap.add_argument("--latency-ms", type=float, default=50.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--root", default=os.path.expanduser("~/.cache/headrace/bench/shards"))
    args = ap.parse_args()
    os.makedirs(args.root, exist_ok=True)
    paths = []
    for i in range(args.files):
        p = os.path.join(args.root, f"shard-{i:05d}.parquet")
        if not os.path.exists(p):
            pq.write_table(pa.table({"label": np.arange(100, dtype=np.int64) + 100 * i}), p)
        paths.append(p)
    urls = [f"{URL}/{os.path.basename(p)}" for p in paths]
    times: dict[str, list[float]] = {"heads-serial": [], "table-open": []}
    digests = set()
    with bench_s3(URL, paths, latency_ms=args.latency_ms) as store:
        for _ in range(args.rounds):
            for side in times:
                t0 = time.perf_counter()
                if side == "heads-serial":
                    stores = ObjectFiles(store)
                    try:
                        for u in urls:
                            stores.info(u)
                    finally:
                        stores.close()
                with Table.open(urls, store_options=store) as t:
                    times[side].append(time.perf_counter() - t0)
                    labels = t.read_rows(np.arange(len(t)), ["label"])["label"]
                    digests.add(hashlib.sha256(np.ascontiguousarray(labels)).hexdigest()[:12])
    _out(f"{args.files} shards, {args.latency_ms:g} ms per request, {args.rounds} rounds (s):")
    for side, ts in times.items():
        _out(f"  {side:13s} median {statistics.median(ts):.3f}  ({min(ts):.3f}-{max(ts):.3f})")
    ratio = statistics.median(times["heads-serial"]) / statistics.median(times["table-open"])
    _out(f"  table-open is {ratio:.1f}x faster than serial HEADs + open; labels digest {digests}")
    return 0 if len(digests) == 1 else 1


if __name__ == "__main__":
    raise SystemExit(main())
