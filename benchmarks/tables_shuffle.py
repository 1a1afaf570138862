"""Shuffled Parquet: the full shuffle vs the windowed shuffle, padded rows/s.

    PYTHONPATH=src python benchmarks/tables_shuffle.py [--root DIR --rows 100000
        --group 8192 --steps 3125 --trials 3 --window-rows 65536 --json OUT]

Writes (once) ``DIR/shuffle-R-gG.parquet``: ``R`` rows of ``input_ids``
(``list<int32>``, 1 to 512 tokens) and ``label`` (``int64``, the row number),
in row groups of ``G`` rows, and the same table as an Arrow IPC file of
``G``-row record batches (``.arrow``). Then runs trials alternating ``full,
window, arrow, full, window, arrow, ...`` (A/B/A/B; ``arrow``, the Arrow file
under its default full shuffle, is a reference added after the prediction):
each a fresh ``TableSource`` (width 512, ``truncate=True``) through
``Loader(batch_size=32, seed=0, prefetch=0)`` for ``--steps`` steps (default
one epoch). Only ``next()`` is timed; hashing is
not. Reports per side the median padded rows/s over the whole run and over
its first 100 batches, the row groups decoded (``Table.decoded``), and the
SHA-256 of the batch stream, which must be the same in every trial of a
side. ``full`` and ``arrow`` read the same plan, so their digests must agree;
``window``'s differs by design (another order). Over a whole epoch every
side must deliver every label exactly once (checked).

Prediction, written before the first run (from docs/rows.md: 917 rows/s for
100 shuffled batches with a 4-group cache, 85,000 rows/s from Arrow IPC):
decoding one 8,192-row group (~2.1 M int32) costs ~35 ms. Full shuffle: each
32-step read touches all 13 groups; with cached groups read first, ~9 of them
are decoded per read, ~900 decodes per epoch (~31 s): ~3,000 rows/s, and
~1,200 rows/s over the first 100 batches. Windowed (65,536 rows = 8 groups):
13 decodes per epoch (0.5 s) plus gathering at about Arrow's speed (1.2 s):
~60,000 rows/s, ~20x the full shuffle; ~10,000 rows/s over the first 100
batches, which pay for decoding the first window.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from headrace.formats import TableSource
from headrace.pipeline import Loader
from headrace.testing import update_digest

B, WIDTH, FIRST = 32, 512, 100


def ensure_files(root: Path, rows: int, group: int) -> tuple[Path, Path]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = root / f"shuffle-{rows}-g{group}.parquet"
    arrow = path.with_suffix(".arrow")
    if path.exists() and arrow.exists():
        return path, arrow
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, WIDTH + 1, rows)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    values = rng.integers(0, 50_000, int(offsets[-1]), dtype=np.int32)
    ids = pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))
    table = pa.table({"input_ids": ids, "label": pa.array(np.arange(rows, dtype=np.int64))})
    tmp = path.with_suffix(".tmp")
    pq.write_table(table, tmp, row_group_size=group)
    tmp.rename(path)  # complete files only
    with pa.OSFile(str(tmp), "wb") as f, pa.ipc.new_file(f, table.schema) as w:
        w.write_table(table, max_chunksize=group)
    tmp.rename(arrow)
    return path, arrow


def trial(path: Path, shuffle: Any, window_rows: int, steps: int) -> dict[str, Any]:
    src = TableSource(path, width=WIDTH, truncate=True, shuffle=shuffle, window_rows=window_rows)
    h = hashlib.sha256()
    labels = []
    waited = first = 0.0
    with Loader(src, batch_size=B, seed=0, prefetch=0, steps=steps) as loader:
        it = iter(loader)
        for i in range(steps):
            t0 = time.perf_counter()
            batch = next(it)
            waited += time.perf_counter() - t0
            if i + 1 == FIRST:
                first = waited
            update_digest(h, batch)
            labels.append(batch["label"])
    decoded = src.table.decoded
    src.close()
    return {
        "rows_per_s": steps * B / waited,
        "first_rows_per_s": min(steps, FIRST) * B / (first or waited),
        "seconds": waited,
        "decoded": decoded,
        "digest": h.hexdigest(),
        "labels": np.concatenate(labels),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--root", type=Path, default=Path("/tmp/headrace-shuffle"))
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--group", type=int, default=8192)
    ap.add_argument("--steps", type=int, default=0, help="default: one epoch")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--window-rows", type=int, default=65_536)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    args.root.mkdir(parents=True, exist_ok=True)
    path, arrow = ensure_files(args.root, args.rows, args.group)
    steps = args.steps or -(-args.rows // B)
    sides = {"full": (path, "full"), "window": (path, "window"), "arrow": (arrow, True)}
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in sides}
    for _ in range(args.trials):
        for s, (p, shuffle) in sides.items():  # A/B/A/B
            r = trial(p, shuffle, args.window_rows, steps)
            runs[s].append(r)
            print(
                f"  {s:6s} {r['rows_per_s']:9,.0f} rows/s  decoded {r['decoded']:5d}  "
                f"{r['digest'][:16]}",
                flush=True,
            )
    ok = True
    report: dict[str, Any] = {
        "path": str(path),
        "rows": args.rows,
        "group": args.group,
        "steps": steps,
        "window_rows": args.window_rows,
        "sides": {},
    }
    for s, rs in runs.items():
        digests = {r["digest"] for r in rs}
        ok &= len(digests) == 1
        if steps * B >= args.rows:  # a whole epoch: every label exactly once
            ok &= bool((np.sort(rs[0]["labels"][: args.rows]) == np.arange(args.rows)).all())
        report["sides"][s] = {
            "rows_per_s_median": statistics.median(r["rows_per_s"] for r in rs),
            "first_rows_per_s_median": statistics.median(r["first_rows_per_s"] for r in rs),
            "decoded": [r["decoded"] for r in rs],
            "digests": sorted(digests),
            "trials_rows_per_s": [r["rows_per_s"] for r in rs],
        }
    print(f"{'side':7s} {'rows/s':>9s} {'first 100':>10s} {'decoded':>8s}  sha256")
    for s, r in report["sides"].items():
        print(
            f"{s:7s} {r['rows_per_s_median']:9,.0f} {r['first_rows_per_s_median']:10,.0f} "
            f"{r['decoded'][0]:8d}  {' '.join(d[:16] for d in r['digests'])}"
        )
    same = report["sides"]["full"]["digests"] == report["sides"]["arrow"]["digests"]
    print("full and arrow digests " + ("agree" if same else "DIFFER"))
    ok &= same
    full, win = (report["sides"][s]["rows_per_s_median"] for s in ("full", "window"))
    print(f"window / full: {win / full:.1f}x; " + ("checks passed" if ok else "CHECKS FAILED"))
    report["ok"] = ok
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
