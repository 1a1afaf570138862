"""Parquet row groups (or an Arrow record batch) larger than ``window_rows`` on S3 behind
a latency proxy: memory, speed.

    PYTHONPATH=src python benchmarks/tables_big_groups_s3.py --src <before>/src --src src
        [--root DIR --groups 2 --group-rows 262144 --window-rows 16384 --steps 6000
         --latency-ms 50 --trials 2 --arrow]

``--arrow``: the same rows as an Arrow IPC file of ONE record batch (what
``pa.ipc`` writers write for a table made from pandas), read with ``shuffle="window"``.

Writes (once) the file of ``tables_big_groups.py`` (``--groups`` row groups of
``--group-rows`` rows of 64-256 int32 tokens, ``input_ids`` only) and serves its
folder as S3 objects (``_files_s3``: ranged GETs read only their bytes; moto reads
the whole object for each) behind a ``LatencyProxy`` of ``--latency-ms`` (a child
process). Each trial runs every ``--src`` side in a fresh process, sides alternating
(A/B/A/B): ``TableSource("s3://...", width=256, truncate=True,
window_rows=--window-rows)``, ``Loader(batch_size=64, seed=0)``, ``--steps`` steps
from step 0 (past the first group when ``steps * 64 > group_rows``). Reported per
side: seconds to the first batch (open included), padded rows/s from the first batch
to the last (hashing included), peak RSS (``VmHWM``), the most fetched bytes the
streams held at once (``Table.peak_stream_bytes``; ``-`` where the code has no such
count), bytes and GETs fetched, and the SHA-256 of the batches (equal on every side,
or the script says so and fails).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _files_s3 import files_s3
from tables_big_groups import ensure_file

B, WIDTH = 64, 256
STORE = {
    "region": "us-east-1",
    "access_key_id": "bench",
    "secret_access_key": "bench",
    "path_style": True,
    "allow_http": True,
}


def peak_rss_mb() -> float:
    """This process's peak RSS: ``VmHWM`` (``ru_maxrss`` of a child starts at the RSS of
    the parent that forked it: the driver, which wrote the file)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_side(url: str, endpoint: str, steps: int, window_rows: int) -> dict[str, Any]:
    import hashlib

    from headrace.formats import TableSource
    from headrace.pipeline import Loader
    from headrace.testing import update_digest

    t0 = time.perf_counter()
    src = TableSource(
        url,
        store_options={**STORE, "endpoint": endpoint},
        columns=["input_ids"],
        width=WIDTH,
        truncate=True,
        window_rows=window_rows,
        shuffle="window",
    )
    ld = Loader(src, batch_size=B, seed=0, steps=steps)
    h = hashlib.sha256()
    it = iter(ld)
    update_digest(h, next(it))
    t1 = time.perf_counter()
    n = 0
    for batch in it:
        update_digest(h, batch)
        n += 1
    busy = time.perf_counter() - t1
    stats = src.object_stats
    held = getattr(src.table, "peak_stream_bytes", None)
    ld.close()
    return {
        "first_s": t1 - t0,
        "rows_per_s": n * B / busy,
        "peak_rss_mb": peak_rss_mb(),
        "held_mb": None if held is None else held / 1e6,
        "fetched_mb": 0 if stats is None else stats.bytes / 1e6,
        "gets": 0 if stats is None else stats.requests,
        "sha256": h.hexdigest()[:12],
    }


def ensure_arrow(parquet: Path) -> Path:
    """The rows of ``parquet`` as an Arrow IPC file of one record batch, beside it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = parquet.with_suffix(".arrow")
    if not path.exists():
        table = pq.read_table(parquet).combine_chunks()
        tmp = path.with_suffix(".tmp")
        with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
            w.write_table(table, max_chunksize=len(table))
        tmp.rename(path)
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default="/tmp/headrace-big-groups-s3")
    ap.add_argument("--groups", type=int, default=2)
    ap.add_argument("--group-rows", type=int, default=262_144)
    ap.add_argument("--window-rows", type=int, default=16_384)
    ap.add_argument("--steps", type=int, default=6_000)
    ap.add_argument("--latency-ms", type=float, default=50)
    ap.add_argument("--trials", type=int, default=2)
    ap.add_argument("--src", action="append", default=[], help="src folders to compare")
    ap.add_argument("--side", action="store_true", help="run one side here (the driver's)")
    ap.add_argument("--url")
    ap.add_argument("--endpoint")
    ap.add_argument("--arrow", action="store_true", help="one Arrow IPC record batch")
    args = ap.parse_args()
    if args.side:
        print(json.dumps(run_side(args.url, args.endpoint, args.steps, args.window_rows)))
        return 0
    from headrace.bench._s3_serve import _proxy

    path = ensure_file(Path(args.root), args.groups, args.group_rows)
    if args.arrow:
        path = ensure_arrow(path)
    url = f"s3://bench/{path.name}"
    srcs = args.src or [str(Path(__file__).resolve().parents[1] / "src")]
    print(
        f"{path.name}: {args.groups} groups of {args.group_rows} rows, "
        f"{path.stat().st_size / 1e6:.0f} MB; window_rows {args.window_rows}, B={B}, "
        f"{args.steps} steps, proxy {args.latency_ms:g} ms",
        flush=True,
    )
    results: dict[str, list[dict[str, Any]]] = {s: [] for s in srcs}
    with files_s3(args.root) as upstream, _proxy(upstream, args.latency_ms, None) as endpoint:
        for trial in range(args.trials):
            for src in srcs:
                env = dict(os.environ, PYTHONPATH=src)
                cmd = [sys.executable, __file__, "--side", "--url", url, "--endpoint", endpoint]
                cmd += ["--steps", str(args.steps), "--window-rows", str(args.window_rows)]
                out = subprocess.check_output(cmd, env=env).decode().splitlines()[-1]
                got = json.loads(out)
                print(trial, src, out, flush=True)
                results[src].append(got)
    print("| code | 1st batch s | rows/s | peak RSS MB | held MB | fetched MB | GETs | sha256 |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    digests = set()
    for src, runs in results.items():

        def med(k: str, runs: list[dict[str, Any]] = runs) -> float:
            return statistics.median(r[k] for r in runs)

        held = "-" if runs[0]["held_mb"] is None else f"{med('held_mb'):.1f}"
        digests |= {r["sha256"] for r in runs}
        print(
            f"| {src} | {med('first_s'):.2f} | {med('rows_per_s'):,.0f} | "
            f"{med('peak_rss_mb'):,.0f} | {held} | "
            f"{med('fetched_mb'):,.0f} | {med('gets'):.0f} | "
            f"{sorted({r['sha256'] for r in runs})} |"
        )
    if len(digests) != 1:
        print(f"DIGESTS DIFFER: {sorted(digests)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
