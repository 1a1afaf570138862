"""Serial mmap vs parallel coalesced pread (io_uring, threads) vs adaptive, on a directory.

    python benchmarks/io_adaptive.py --root DIR [--rows 16384 --width 4100 --batch 64
                                                 --batches 16 --trials 3 --json OUT]

Writes (once) ``DIR/io_adaptive.bin`` of ``rows x width`` random bytes unless
it exists, then runs trials in alternating order (A B C, C B A, ...). Each
side reads its own disjoint rows (a seeded permutation split into stripes),
so no side rides another's page cache; each side's output is checked against
a plain ``os.pread`` of the same rows outside the timed interval; and a final
untimed pass reads one set of rows through every side and requires identical
SHA-256 digests. Reports median seconds per batch, rows/s, ratios against
serial mmap, and every digest.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from headrace.io import RangeReader, ReaderConfig

SIDES = {
    "mmap": lambda: RangeReader("mmap"),
    "pread": lambda: RangeReader(ReaderConfig(strategy="pread")),  # io_uring where it works
    "pread-threads": lambda: RangeReader(ReaderConfig(strategy="pread", engine="threads")),
    "adaptive": lambda: RangeReader("adaptive"),
}


def ensure_file(root: Path, rows: int, width: int, seed: int) -> Path:
    path = root / "io_adaptive.bin"
    if path.exists() and path.stat().st_size == rows * width:
        return path
    rng = np.random.default_rng(seed)
    with path.open("wb") as fh:
        left = rows * width
        while left:
            n = min(left, 16 << 20)
            fh.write(rng.bytes(n))
            left -= n
    return path


def reference(path: Path, idx: np.ndarray, width: int) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        return b"".join(os.pread(fd, width, int(i) * width) for i in idx)
    finally:
        os.close(fd)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, required=True)
    ap.add_argument("--rows", type=int, default=16384)
    ap.add_argument("--width", type=int, default=4100)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--batches", type=int, default=16, help="batches per side per trial")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args(argv)
    path = ensure_file(a.root, a.rows, a.width, a.seed)
    names = list(SIDES)
    need = a.trials * len(names) * a.batches * a.batch
    if need > a.rows:
        print(f"need {need} distinct rows for disjoint stripes; have {a.rows}", file=sys.stderr)
        return 2
    perm = np.random.default_rng(a.seed + 1).permutation(a.rows)
    times: dict[str, list[float]] = {n: [] for n in names}
    verified = dict.fromkeys(names, True)
    digests: dict[str, list[str]] = {n: [] for n in names}
    stats: dict[str, dict[str, object]] = {}
    stripe = 0
    for t in range(a.trials):
        order = names if t % 2 == 0 else names[::-1]
        for name in order:
            rows = perm[stripe * a.batches * a.batch : (stripe + 1) * a.batches * a.batch]
            stripe += 1
            h = hashlib.sha256()
            outs = []
            with SIDES[name]() as reader:
                for b in range(a.batches):
                    idx = rows[b * a.batch : (b + 1) * a.batch]
                    t0 = time.perf_counter()
                    out = reader.read_rows(str(path), idx, a.width)
                    times[name].append(time.perf_counter() - t0)
                    outs.append(out)
                s = reader.stats
                stats[name] = {
                    "mode_switches": s.mode_switches,
                    "probes": s.probes,
                    "reads_by_mode": s.reads_by_mode,
                    "current_mode": s.current_mode,
                }
            for out in outs:
                h.update(out.tobytes())
            digests[name].append(h.hexdigest())
            expect = hashlib.sha256(reference(path, rows, a.width)).hexdigest()
            verified[name] = verified[name] and expect == h.hexdigest()
    # Same rows through every side (untimed): digests must agree.
    common = perm[: a.batch * 4]
    same = {}
    for name in names:
        with SIDES[name]() as reader:
            same[name] = hashlib.sha256(reader.read_rows(str(path), common, a.width)).hexdigest()
    med = {n: statistics.median(times[n]) for n in names}
    report = {
        "path": str(path),
        "rows": a.rows,
        "width": a.width,
        "batch": a.batch,
        "batches_per_trial": a.batches,
        "trials": a.trials,
        "median_batch_seconds": med,
        "rows_per_second": {n: a.batch / med[n] if med[n] else None for n in names},
        "ratio_vs_mmap": {n: med["mmap"] / med[n] if med[n] else None for n in names},
        "verified": verified,
        "digests": digests,
        "common_rows_digest": same,
        "common_rows_identical": len(set(same.values())) == 1,
        "adaptive_last_trial": stats.get("adaptive"),
    }
    print(f"{'side':13} {'median s/batch':>15} {'rows/s':>10} {'x mmap':>7}  verified")
    for n in names:
        rate, ratio = a.batch / med[n], med["mmap"] / med[n]
        print(f"{n:13} {med[n]:>15.6f} {rate:>10,.0f} {ratio:>7.2f}  {verified[n]}")
    print(
        f"same rows, every side: digest {next(iter(same.values()))[:16]}... "
        f"identical={report['common_rows_identical']}"
    )
    print(f"adaptive: {stats.get('adaptive')}")
    if a.json:
        a.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0 if all(verified.values()) and report["common_rows_identical"] else 1


if __name__ == "__main__":
    sys.exit(main())
