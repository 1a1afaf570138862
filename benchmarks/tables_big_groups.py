"""Parquet row groups larger than ``window_rows`` under the windowed shuffle: memory and speed.

    PYTHONPATH=src python benchmarks/tables_big_groups.py [--root DIR --groups 2
        --group-rows 1048576 --steps 1500 --trials 2 --json OUT]
    ... --side NAME --src PATH   # one side alone, in this process (what the driver runs)

Writes (once) ``DIR/big-G-gR.parquet`` as pyarrow's default writer lays a dataset out:
``G`` row groups of ``R`` rows (1,048,576: ``pq.write_table``'s default), one
``input_ids`` column (``list<int32>``, 64 to 256 tokens a row). Each trial runs
every side in a fresh process (peak RSS is the process's ``VmHWM``: its
``ru_maxrss`` starts at the peak of the driver that spawned it, which may have
written the file), alternating the sides (A/B/A/B). A side opens ``TableSource(width=256,
truncate=True, window_rows=65,536)`` and a ``Loader(batch_size=64, seed=0)``:

- ``start``: from step 0, ``--steps`` steps: seconds to the first batch (open
  included) and padded rows/s over the rest;
- ``epoch``: ``start`` over a whole epoch (``--steps`` is ignored: every row once);
- ``switch``: resumed ``--steps // 2`` steps before the first window switch
  (step ``R / 64``), ``--steps`` steps across it: seconds to the first batch
  (what a resume in the middle of a row group costs) and rows/s.

Prediction (made from the first "before" run, before the change was built; written
here after it): peak RSS from ~2.9 GB (one 671 MB group decoded, its 338 MB of
compressed chunks pre-buffered, copies) to under 400 MB (two 42 MB sub-windows
and pyarrow's stream buffers); first batch from ~3.4 s to ~0.3 s (a sixteenth of
a group's decode); ``start`` rows/s within 20% (each row still decoded once);
``switch`` (resumed mid-group) about as slow to its first batch as before (the
stream decodes the 15 sub-windows before it, about one group), then many times
the rows/s across the switch (a sub-window of the next group, not all of it).

Rows/s is over the wall time from the first batch to the last (the loader's
producer runs ahead meanwhile), hashing included.

``--window-rows 1048576`` (every group fits a window: the plan did not change)
checks that both codes give the same batches there.

``--src`` picks the code (a ``src`` folder: this worktree's, or a checkout of
the code before the change), so before and after run side by side. Each side
reports the SHA-256 of its batches.
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

import numpy as np

B, WIDTH = 64, 256
WINDOW = int(os.environ.get("HEADRACE_BENCH_WINDOW_ROWS", 65_536))  # --window-rows


def ensure_file(root: Path, groups: int, group_rows: int) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = root / f"big-{groups}-g{group_rows}.parquet"
    if path.exists():
        return path
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    rows = groups * group_rows
    lengths = rng.integers(64, 257, rows)
    offsets = np.zeros(rows + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    values = rng.integers(0, 50_257, int(offsets[-1]), dtype=np.int32)
    ids = pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))
    tmp = path.with_suffix(".tmp")
    # pyarrow's default layout: row groups of 1,048,576 rows (a dataset as users write it).
    pq.write_table(pa.table({"input_ids": ids}), tmp, row_group_size=group_rows)
    tmp.rename(path)
    return path


def peak_rss_mb() -> float:
    """This process's peak RSS: ``VmHWM`` (``ru_maxrss`` is not its own: exec keeps the
    high-water mark of the driver's memory it replaced, a vfork shares it)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_side(side: str, path: str, steps: int, group_rows: int) -> dict[str, Any]:
    import hashlib

    from headrace.formats import TableSource
    from headrace.pipeline import Loader
    from headrace.testing import update_digest

    t0 = time.perf_counter()
    src = TableSource(path, columns=["input_ids"], width=WIDTH, truncate=True, window_rows=WINDOW)
    ld = Loader(src, batch_size=B, seed=0)
    if side == "epoch":
        steps = src.samples_per_epoch // B
    if side == "switch":
        state = ld.state_dict()
        state["step"] = group_rows // B - steps // 2
        ld.load_state_dict(state)
    h = hashlib.sha256()
    it = iter(ld)
    first = next(it)
    t1 = time.perf_counter()
    update_digest(h, first)
    n = 0
    for _ in range(steps - 1):
        update_digest(h, next(it))
        n += 1
    busy = time.perf_counter() - t1
    ld.close()
    return {
        "side": side,
        "first_s": t1 - t0,
        "rows_per_s": n * B / busy,
        "peak_rss_mb": peak_rss_mb(),
        "ru_maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "decoded": src.table.decoded,
        "decoded_rows": getattr(src.table, "decoded_rows", -1),
        "peak_rows": getattr(src.table, "peak_rows", -1),
        "sha256": h.hexdigest()[:12],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default="/tmp/headrace-big-groups")
    ap.add_argument("--groups", type=int, default=2)
    ap.add_argument("--group-rows", type=int, default=1_048_576)
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--trials", type=int, default=2)
    ap.add_argument("--src", action="append", default=[], help="src folders to compare")
    ap.add_argument("--window-rows", type=int, default=WINDOW)
    ap.add_argument("--sides", default="start,switch", help="which sides, comma-separated")
    ap.add_argument("--side")
    ap.add_argument("--file")
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.side:
        out = run_side(args.side, args.file, args.steps, args.group_rows)
        print(json.dumps(out))
        return
    path = ensure_file(Path(args.root), args.groups, args.group_rows)
    srcs = args.src or [str(Path(__file__).resolve().parents[1] / "src")]
    results: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for trial in range(args.trials):
        for side in args.sides.split(","):
            for src in srcs:
                env = dict(os.environ, PYTHONPATH=src)
                env["HEADRACE_BENCH_WINDOW_ROWS"] = str(args.window_rows)
                cmd = [sys.executable, __file__, "--side", side, "--file", str(path)]
                cmd += ["--steps", str(args.steps), "--group-rows", str(args.group_rows)]
                got = json.loads(subprocess.check_output(cmd, env=env).decode().splitlines()[-1])
                print(trial, src, json.dumps(got), flush=True)
                results.setdefault((src, side), []).append(got)
    summary = []
    for (src, side), runs in results.items():
        med = {
            k: statistics.median(r[k] for r in runs)
            for k in ("first_s", "rows_per_s", "peak_rss_mb", "decoded")
        }
        digests = sorted({r["sha256"] for r in runs})
        summary.append({"src": src, "side": side, **med, "sha256": digests})
        print(
            f"{src:40s} {side:7s} first {med['first_s']:7.3f} s  {med['rows_per_s']:9.0f} rows/s"
            f"  peak RSS {med['peak_rss_mb']:7.0f} MB  decoded {med['decoded']:.0f}  {digests}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
