"""pad_batch vs a naive Python-list padder: B=32 rows, widths up to 1024, A/B/A/B medians.

Run: PYTHONPATH=src python benchmarks/collate.py
Both sides produce the same batch; their SHA-256 digests are printed and checked.
"""

from __future__ import annotations

import hashlib
import statistics
import time
from itertools import pairwise

import numpy as np

from headrace.collate import pad_batch
from headrace.formats import Ragged


def naive(rows: list[list[int]], pad: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The usual padder: pad Python lists, then build the arrays."""
    w = max(map(len, rows))
    vals = [r + [pad] * (w - len(r)) for r in rows]
    mask = [[1] * len(r) + [0] * (w - len(r)) for r in rows]
    return np.array(vals, dtype=np.int64), np.array(mask, dtype=bool)


def timed(fn, reps: int) -> float:
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t) / reps


def main() -> None:
    rng = np.random.default_rng(0)
    print(f"{'width':>6} {'input':>10} {'naive us':>9} {'pad_batch us':>12} {'speedup':>8}  digest")
    for width in (128, 512, 1024):
        lens = rng.integers(width // 4, width + 1, 32)
        lens[0] = width
        flat = rng.integers(0, 50_000, int(lens.sum()), dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
        ragged = Ragged(values=flat, offsets=offsets)
        lists = [flat[a:b].tolist() for a, b in pairwise(offsets)]
        arrays = [flat[a:b] for a, b in pairwise(offsets)]
        want = naive(lists)
        digest = hashlib.sha256(want[0].tobytes() + want[1].tobytes()).hexdigest()[:12]
        # ">i32": an explicit narrower dtype, whose values pad_batch checks for
        # overflow (two reductions over the batch) and, from floats, for
        # fractions; compared with the naive padder's output cast to int32.
        digest32 = hashlib.sha256(want[0].astype(np.int32).tobytes() + want[1].tobytes())
        cases = [
            ("ragged", ragged, None),
            ("arrays", arrays, None),
            ("lists", lists, None),
            ("ragged>i32", ragged, np.int32),
            ("arrays>i32", arrays, np.int32),
            # Whole floats into int32: checked for fractions as well as range.
            ("floats>i32", [a.astype(np.float64) for a in arrays], np.int32),
        ]
        for label, form, dtype in cases:
            got = pad_batch(form, dtype=dtype)
            d = hashlib.sha256(got[0].tobytes() + got[1].tobytes()).hexdigest()[:12]
            assert d == (digest if dtype is None else digest32.hexdigest()[:12]), (label, d)
            reps = 200 if label != "lists" else 50
            a_runs, b_runs = [], []
            for _ in range(3):  # A/B/A/B...
                a_runs.append(timed(lambda rows=lists: naive(rows), 20))
                b_runs.append(timed(lambda f=form, dt=dtype: pad_batch(f, dtype=dt), reps))
            a, b = statistics.median(a_runs) * 1e6, statistics.median(b_runs) * 1e6
            print(f"{width:>6} {label:>10} {a:>9.0f} {b:>12.1f} {a / b:>7.1f}x  {d}")


if __name__ == "__main__":
    main()
