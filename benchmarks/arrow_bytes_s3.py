"""Bytes an Arrow table on S3 fetches for its first batch and for N batches, against
the bytes those reads need.

    PYTHONPATH=src python benchmarks/arrow_bytes_s3.py [--latency-ms 0,50] [--batches 16]
        [--rounds 2] [--root DIR] [--before SRC]

Shapes (``save_to_disk`` shards, written once under ``--root``): ``text``: 300
record batches of 1,000 rows of ~1 KB text and an int64 id (~1 MiB batches, the
shard of ``benchmarks/arrow_walk_s3.py``); ``tokens``: 100 record batches of 1,000
rows of 64-1,024 int32 token ids (``list<int32>``, ~2.2 MiB batches). Served by
``_files_s3`` (moto reads a whole object for every ranged GET: see that module)
through a ``LatencyProxy`` of each ``--latency-ms``. Each trial opens a fresh
``Table`` of the one column (``text`` / ``input_ids``) and reads ``--batches``
batches of 32 random rows (``read_rows``, seeded), counting the store's bytes:

``open``        the header walk: needed, the schema and every record batch's
                prefix and header (the walk reads nothing else it keeps)
``first batch`` open plus one batch: needed, open's plus each record batch the rows
                lie in, its header and its column's buffers (what pyarrow decodes)
``N batches``   the same for all of them
``rows``        the bytes of the rows themselves (offsets and values)

With ``--epochs``, also two epochs of ``--batches``-free reading through a ``Loader``
(``TableSource``, its default windowed shuffle), bytes at the end of each: the second
epoch's are one epoch's (the read-ahead into the next counted once each way).

Each trial is a fresh process; with ``--before SRC`` (the ``src`` folder of another
checkout, e.g. ``git worktree add /tmp/before COMMIT``) the two sides alternate,
A/B/A/B, and open seconds are printed too. The digest is over every row read (equal
across sides, latencies and rounds).

Prediction (written before measuring): the walk fetches 64 KiB at each ~1 MiB
batch's header where ~0.5 KiB is needed, and guesses add windows of up to 128 KiB:
open ~40 MiB for text (~100x what it needs), ~10 MiB for tokens; the batches fetch
what they need (1.0x: header plus column stretch), ~30 record batches for the first
batch of 32 rows; 16 batches touch ~250 of 300 text batches (~250 MiB) for ~0.5 MiB of
rows. Latency changes open's bytes a little (guesses race the walk), not the batches'.

Measured (3 rounds, 0 and 50 ms, 2c, 2026-12-03; before: the walk's 64 KiB GET at
every header; after: twice the longest header, at least 4 KiB, once messages average
more than 64 KiB): open, MiB got / needed: text 41.81 -> 39.98 / 0.06 (nearly all
guesses' windows), tokens 8.15 -> 2.62 / 0.02 (not guessed: sizes vary too much);
open at 50 ms text 4.23 -> 3.88 s, tokens 6.32 -> 6.59 s (a GET a header on both
sides). First batch: exactly what pyarrow decodes past open (text 28.75 MiB for
0.03 MiB of rows; tokens 54.01 for 0.07). 16 batches: 2.14x (text) / 4.13x (tokens)
the distinct record batches touched, re-fetched past ``row_group_cache`` (4), the
same before and after. Digests fd994a2fb055 (text), 15d3b0921759 (tokens) on every
side, latency and round. Latency did not change the bytes. The walks made the same
GETs (tokens 121, 7 read from guesses) on both sides: open times differ by noise.
``--epochs`` (0 ms): the second epoch through a Loader fetched 0.99x (text) and 0.96x
(tokens) an epoch's needed bytes, the same before and after.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from _files_s3 import files_s3, store_options
from _out import out
from arrow_walk_slowfs import text_shard

import headrace
from headrace.bench._s3_serve import _proxy
from headrace.formats import Table, TableSource
from headrace.pipeline import Loader

URL = "s3://headrace-bench"
MiB = 1 << 20
B = 32
COLUMN = {"text": "text", "tokens": "input_ids"}


def token_shard(path: Path) -> None:
    rng = np.random.default_rng(3)
    schema = pa.schema([("input_ids", pa.list_(pa.int32()))])
    with pa.OSFile(str(path), "wb") as f, pa.ipc.new_stream(f, schema) as w:
        for _ in range(100):
            lens = rng.integers(64, 1025, 1000)
            offs = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
            v = pa.array(rng.integers(0, 50_000, int(offs[-1]), dtype=np.int32))
            w.write_batch(pa.record_batch([pa.ListArray.from_arrays(offs, v)], schema=schema))


def write(root: Path) -> None:
    for shape, make in (("text", lambda p: text_shard(p, 0)), ("tokens", token_shard)):
        d = root / shape
        if (d / "state.json").exists():
            continue
        d.mkdir(parents=True, exist_ok=True)
        make(d / "data-00000-of-00001.arrow")
        (d / "state.json").write_text(
            json.dumps({"_data_files": [{"filename": "data-00000-of-00001.arrow"}]})
        )


def needed(t: Table, column: str, batches: set[tuple[int, int]]) -> tuple[int, int]:
    """(open's bytes needed, the record batches' ``batches`` bytes needed)."""
    walk = reads = 0
    for i, part in enumerate(t._parts):
        ix = part.index
        walk += len(ix.schema_message) + sum(ix.heads)
        col = part.schema.get_field_index(column)
        for pi, g in batches:
            if pi == i:
                lo, hi = ix.columns[g, col].tolist()
                reads += ix.heads[g] + hi - lo
    return walk, reads


def _got(t: Table) -> int:
    stats = t.object_stats  # a snapshot
    assert stats is not None
    return stats.bytes


def trial(url: str, store: dict[str, Any], column: str, n: int) -> dict[str, Any]:
    t = Table.open(url, columns=[column], store_options=store)
    opened = time.perf_counter()
    got = {"open": _got(t)}
    rng = np.random.default_rng(0)
    h = hashlib.sha256()
    touched: set[tuple[int, int]] = set()
    row_bytes = 0
    starts = np.asarray(t.group_rows).cumsum() - np.asarray(t.group_rows)
    for k in range(n):
        rows = rng.integers(0, t.num_rows, B)
        col = t.read_rows(rows)[column]
        for a in (col.values, col.offsets):
            h.update(np.ascontiguousarray(a).tobytes())
        row_bytes += col.values.nbytes + 4 * B
        for g in (np.searchsorted(starts, rows, side="right") - 1).tolist():
            touched.add((0, g))
        if k == 0:
            got["first"] = _got(t)
            first_need, first_rows = needed(t, column, set(touched)), row_bytes
    got["all"] = _got(t)
    walk, reads = needed(t, column, touched)
    t.close()
    return {
        "got": got,
        "need": {"open": walk, "first": walk + first_need[1], "all": walk + reads},
        "rows": {"first": first_rows, "all": row_bytes},
        "touched": len(touched),
        "sha": h.hexdigest()[:12],
        "open_s": opened,
    }


def epochs(url: str, store: dict[str, Any], column: str) -> dict[str, Any]:
    """Bytes of two epochs through a ``Loader`` (``TableSource``'s default shuffle
    here: windows), at the end of each: the second less the first is one epoch's
    fetches, the read-ahead into the next epoch counted in both."""
    src = TableSource(url, columns=[column], width=2048, store_options=store)
    t = src.table
    h = hashlib.sha256()
    ends = []
    with Loader(src, batch_size=B, seed=0) as ld:
        steps = len(src) // B
        for i, b in zip(range(2 * steps), ld, strict=False):
            h.update(np.ascontiguousarray(b[column]).tobytes())
            if (i + 1) % steps == 0:
                ends.append(_got(t))
    everything = {(0, g) for g in range(len(t.group_rows))}
    return {"ends": ends, "need": sum(needed(t, column, everything)), "sha": h.hexdigest()[:12]}


def _child(url: str, store: str, column: str, n: int) -> None:
    if n == 0:
        print(json.dumps(epochs(url, json.loads(store), column)))
        return
    t0 = time.perf_counter()
    res = trial(url, json.loads(store), column, n)
    res["open_s"] = res.pop("open_s") - t0
    print(json.dumps(res))


def _run(src: str, url: str, store: dict[str, Any], column: str, n: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.path.dirname(__file__)])}
    cmd = [sys.executable, __file__, "--child", url, json.dumps(store), column, str(n)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)
    return dict(json.loads(done.stdout))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--latency-ms", default="0,50")
    ap.add_argument("--batches", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument(
        "--root", default=os.path.join(tempfile.gettempdir(), "headrace-bench-arrow-bytes-s3")
    )
    ap.add_argument("--before", help="src folder of the code to compare with")
    ap.add_argument("--epochs", action="store_true", help="also two epochs through a Loader")
    args = ap.parse_args()
    write(Path(args.root))
    here = os.path.dirname(os.path.dirname(os.path.abspath(headrace.__file__)))
    sides = {"after": here} | ({"before": args.before} if args.before else {})
    out(f"sides: {sides}")
    out(
        "| shape | latency | side | stage | MiB got | MiB needed | got/needed | rows MiB "
        "| open s | digest |"
    )
    out("|---|---|---|---|---|---|---|---|---|---|")
    ok = True
    with files_s3(args.root) as upstream:
        for ms in (float(x) for x in args.latency_ms.split(",")):
            with _proxy(upstream, ms, None) as endpoint:
                store = store_options(endpoint)
                for shape, column in COLUMN.items():
                    url = f"{URL}/{shape}"
                    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in sides}
                    for _ in range(args.rounds):
                        for side, src in sides.items():  # A/B/A/B
                            runs[side].append(_run(src, url, store, column, args.batches))
                    shas = {r["sha"] for rs in runs.values() for r in rs}
                    ok = ok and len(shas) == 1
                    for side, rs in runs.items():
                        took = statistics.median(r["open_s"] for r in rs)
                        for stage in ("open", "first", "all"):
                            g = statistics.median(r["got"][stage] for r in rs)
                            need = rs[0]["need"][stage]
                            label = {"all": f"{args.batches} batches", "first": "first batch"}
                            rows = "" if stage == "open" else f"{rs[0]['rows'][stage] / MiB:.2f}"
                            out(
                                f"| {shape} | {ms:g} ms | {side} | {label.get(stage, stage)} "
                                f"| {g / MiB:.2f} | {need / MiB:.2f} | {g / need:.2f}x | {rows} "
                                f"| {took:.2f} | {'/'.join(shas)} |"
                            )
                    if not args.epochs:
                        continue
                    for side, src in sides.items():
                        e = _run(src, url, store, column, 0)
                        a, b = e["ends"]
                        out(
                            f"| {shape} | {ms:g} ms | {side} | epoch 1 / 2 (Loader) | {a / MiB:.2f}"
                            f" / {b / MiB:.2f} | {e['need'] / MiB:.2f} an epoch | "
                            f"{(b - a) / e['need']:.2f}x (epoch 2) | | | {e['sha']} |"
                        )
    if not ok:
        out("FAIL: rounds read different rows")
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _child(*sys.argv[2:5], int(sys.argv[5]))
    else:
        sys.exit(main())
