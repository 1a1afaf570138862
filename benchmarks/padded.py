"""Padded rows: naive per-row memmap + Python shift vs headrace PaddedRows via the Loader.

16,384 rows of stored width 1025 (context 1024), global batch 32, one epoch
(512 batches) per trial, A/B/A/B alternation, medians. Both variants'
batch streams are hashed first (outside the timed runs) and must match.

Run: PYTHONPATH=src python benchmarks/padded.py [--root DIR] [--trials 3] [--strategy adaptive]
"""

from __future__ import annotations

import argparse
import tempfile

from headrace.bench._rows_workload import make_table_dataset, measure_padded, measure_table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=None, help="dataset directory (default: a temp dir)")
    ap.add_argument("--rows", type=int, default=16_384)
    ap.add_argument("--width", type=int, default=1025)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--steps", type=int, default=512)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--strategy", default="adaptive")
    ap.add_argument("--table-rows", type=int, default=0, help="also run the table workload")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = args.root or tmp
        r = measure_padded(
            root,
            rows=args.rows,
            width=args.width,
            batch_size=args.batch_size,
            steps=args.steps,
            trials=args.trials,
            strategy=args.strategy,
        )
        print(
            f"padded: {r['rows']} rows x {r['width']}, B={r['batch_size']}, "
            f"{r['steps']} batches/trial, {r['trials']} A/B trials, strategy {args.strategy}"
        )
        print(f"{'variant':>9} {'median s':>9} {'batches/s':>10}  trials")
        for k in ("naive", "headrace"):
            v = r[k]
            trials = " ".join(f"{t:.3f}" for t in v["trials_s"])
            print(f"{k:>9} {v['median_s']:>9.3f} {v['batches_per_s']:>10.0f}  {trials}")
        print(f"speedup {r['speedup']:.1f}x; digests equal: {r['digest'][:16]}")
        digests = set()
        for fmt in ("arrow", "parquet") if args.table_rows else ():
            t = measure_table(make_table_dataset(root, rows=args.table_rows, fmt=fmt), steps=100)
            digests.add(t["digest"])
            print(
                f"table ({fmt}): {t['rows']} rows, open {t['open_s'] * 1e3:.1f} ms, "
                f"{t['rows_per_s']:.0f} padded rows/s (width 512), digest {t['digest'][:16]}"
            )
        assert len(digests) <= 1, "arrow and parquet tables disagree"


if __name__ == "__main__":
    main()
