"""Padded rows on slow storage: the full shuffle vs the windowed shuffle, rows/s.

    PYTHONPATH=src python benchmarks/rows_window.py [--root DIR --rows 16384
        --steps 512 --latency-ms 5 --trials 3 --local-trials 5 --strategy adaptive
        --max-span 4194304 --json OUT]

Writes (once) ``DIR/src/tokens.bin`` (+ ``tokens.bin.json``): ``--rows`` rows of
1025 uint16 tokens, right-padded with 0 after 64 to 1025 real tokens. Mounts
``DIR/src`` at ``DIR/mnt`` through slowfs (``headrace emulate slowfs SRC MNT
--read-latency-ms 5``: every FUSE READ sleeps 5 ms; the mount is stopped with
``fusermount3 -u`` and its server waited for by PID when done). Then runs
trials alternating ``full, window, full, window, ...`` (A/B/A/B): each a fresh
``PaddedRows(context=1024, reader=RangeReader("adaptive"))`` with
``shuffle=True`` (full) or ``shuffle="window"`` (default ``window_rows``),
through ``Loader(batch_size=32, seed=0)`` (async, default read-ahead) for one
epoch (512 batches; ``--steps`` to change; ``--strategy`` and ``--max-span``
set the reader's ``ReaderConfig``). slowfs drops a file's page cache when it is opened, so
every trial starts cold. The wall time from ``iter()`` to the last batch is
timed; batches are kept and hashed after the clock stops. The same sides then
run over the local file, read once beforehand so it is in the page cache.

Reported per side: median padded rows/s (and every trial), slowfs READs and
bytes, the reader's reads and bytes, and the SHA-256 of the batch stream, which
must be the same in every trial of a side and the same on slowfs and locally.

Prediction, written before the first run. File: 16,384 x 2,050 B = 33.6 MB;
default windows: 3 of 5,462 rows (11.2 MB). slowfs READs are ~128 KiB for
sequential and faulting reads, 4 KiB for isolated random preads.
- Full shuffle: the adaptive reader starts mapped; the first batch (32 serial
  faults, ~5 ms each) takes ~170 ms and switches it to parallel preads. Loader
  chunks grow 32, 64, 128, 256, 512, 1,024 rows: the small ones are random 4 KiB
  READs, 8 in flight (~0.5 s in all); from 1,024 rows on the sorted rows are
  closer than the 64 KiB gap limit, so a chunk coalesces into 4 MiB spans
  covering most of the file, which then sits in the page cache. ~1.0-1.2 s per
  epoch: ~15,000 rows/s, ~1,100 READs.
- Windowed: the first window is read mapped (serial faults with kernel
  readahead, ~90 READs of 128 KiB, ~1.5 in flight): ~0.4 s, which switches the
  reader to preads; windows 2 and 3 are read ahead in 4 MiB spans in parallel
  (~80 ms each) while window 1 is consumed. ~0.6 s per epoch: ~27,000 rows/s
  (~1.8x the full shuffle), ~300 READs.
- Local page cache: the full shuffle stays on mapped reads (~230,000 rows/s, per
  docs/rows.md); windowed adds a window copy and a gather (~2 extra passes over
  33.6 MB): ~0.8x the full shuffle.

Results, and what the prediction missed: docs/rows.md ("Windowed row files on
slow storage").
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from headrace.emulate import SlowMount, fuse_available
from headrace.formats import PaddedRows, write_row_file
from headrace.io import RangeReader, ReaderConfig
from headrace.pipeline import Loader
from headrace.testing import update_digest

B, WIDTH = 32, 1025
SIDES = {"full": True, "window": "window"}


def ensure_file(src: Path, rows: int) -> Path:
    path = src / "tokens.bin"
    if path.exists() and path.stat().st_size == rows * WIDTH * 2:
        return path
    src.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    tok = rng.integers(1, 50_000, (rows, WIDTH), dtype=np.uint16)
    tok[np.arange(WIDTH)[None, :] >= rng.integers(64, WIDTH + 1, rows)[:, None]] = 0
    write_row_file(path, tok)
    return path


def trial(
    path: Path, shuffle: Any, steps: int, mount: SlowMount | None, config: ReaderConfig
) -> dict[str, Any]:
    before = mount.stats() if mount is not None else None
    reader = RangeReader(config)
    src = PaddedRows(path, context=WIDTH - 1, shuffle=shuffle, reader=reader)
    batches: list[dict[str, Any]] = []
    with Loader(src, batch_size=B, seed=0, steps=steps) as loader:
        t0 = time.perf_counter()
        it = iter(loader)
        batches.append(next(it))
        first = time.perf_counter() - t0
        batches.extend(it)
        seconds = time.perf_counter() - t0
    stats = reader.stats
    reader.close()
    h = hashlib.sha256()
    for b in batches:
        update_digest(h, b)
    out: dict[str, Any] = {
        "rows_per_s": steps * B / seconds,
        "seconds": seconds,
        "first_batch_s": first,
        "read_s_by_mode": {k: round(v, 3) for k, v in stats.seconds_by_mode.items()},
        "digest": h.hexdigest(),
        "reads": stats.reads,
        "bytes_read": stats.bytes_read,
        "mode": stats.current_mode,
        "window_rows": src.window_rows,
    }
    if mount is not None and before is not None:
        after = mount.stats()
        out["fuse_reads"] = after["reads"] - before["reads"]
        out["fuse_bytes"] = after["bytes_read"] - before["bytes_read"]
    return out


def run_sides(
    path: Path, trials: int, steps: int, mount: SlowMount | None, tag: str, config: ReaderConfig
) -> dict[str, list[dict[str, Any]]]:
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in SIDES}
    for _ in range(trials):
        for s, shuffle in SIDES.items():  # A/B/A/B
            r = trial(path, shuffle, steps, mount, config)
            runs[s].append(r)
            fuse = f"  {r['fuse_reads']:5d} READs {r['fuse_bytes'] / 1e6:6.1f} MB" if mount else ""
            print(
                f"  {tag:5s} {s:6s} {r['rows_per_s']:9,.0f} rows/s  {r['seconds']:6.3f} s "
                f"(first {r['first_batch_s']:.3f})  reads {r['reads']:4d} {r['read_s_by_mode']}"
                f"{fuse}  {r['digest'][:16]}",
                flush=True,
            )
    return runs


def summarise(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    out = {}
    for s, rs in runs.items():
        out[s] = {
            "rows_per_s_median": statistics.median(r["rows_per_s"] for r in rs),
            "trials_rows_per_s": [round(r["rows_per_s"]) for r in rs],
            "first_batch_s": [round(r["first_batch_s"], 3) for r in rs],
            "digests": sorted({r["digest"] for r in rs}),
            "reads": [r["reads"] for r in rs],
            "bytes_read": [r["bytes_read"] for r in rs],
            "window_rows": rs[0]["window_rows"],
            **({"fuse_reads": [r["fuse_reads"] for r in rs]} if "fuse_reads" in rs[0] else {}),
            **({"fuse_bytes": [r["fuse_bytes"] for r in rs]} if "fuse_bytes" in rs[0] else {}),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--root", type=Path, default=Path("/tmp/headrace-rows-window"))
    ap.add_argument("--rows", type=int, default=16_384)
    ap.add_argument("--steps", type=int, default=0, help="default: one epoch")
    ap.add_argument("--latency-ms", type=float, default=5.0)
    ap.add_argument("--strategy", default="adaptive")
    ap.add_argument("--max-span", type=int, default=4 << 20)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--local-trials", type=int, default=5, help=">= 1")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    ok, why = fuse_available()
    if not ok:
        print(f"skip: FUSE unavailable: {why}")
        return 0
    path = ensure_file(args.root / "src", args.rows)
    steps = args.steps or args.rows // B
    config = ReaderConfig(strategy=args.strategy, max_span=args.max_span)
    report: dict[str, Any] = {
        "rows": args.rows,
        "steps": steps,
        "latency_ms": args.latency_ms,
        "strategy": args.strategy,
        "max_span": args.max_span,
    }
    mnt = args.root / "mnt"
    mnt.mkdir(exist_ok=True)
    with SlowMount(
        path.parent, mnt, read_latency_ms=args.latency_ms, stats_interval_s=0.05
    ) as mount:
        slow = run_sides(mnt / path.name, args.trials, steps, mount, "slow", config)
    subprocess.run(["cat", str(path)], stdout=subprocess.DEVNULL, check=True)  # page cache
    local = run_sides(path, args.local_trials, steps, None, "local", config)
    report["slowfs"], report["local"] = summarise(slow), summarise(local)
    good = True
    for s in SIDES:
        digests = {*report["slowfs"][s]["digests"], *report["local"][s]["digests"]}
        good &= len(digests) == 1  # every trial, slowfs or local, delivered the same stream
    print(f"{'where':6s} {'side':7s} {'rows/s':>9s}  trials  sha256")
    for where in ("slowfs", "local"):
        for s, r in report[where].items():
            print(
                f"{where:6s} {s:7s} {r['rows_per_s_median']:9,.0f}  {r['trials_rows_per_s']}  "
                f"{' '.join(d[:16] for d in r['digests'])}"
            )
    for where in ("slowfs", "local"):
        full, win = (report[where][s]["rows_per_s_median"] for s in SIDES)
        print(f"{where}: window / full = {win / full:.2f}x")
    print("digests " + ("agree in every trial" if good else "DIFFER"))
    report["ok"] = good
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
