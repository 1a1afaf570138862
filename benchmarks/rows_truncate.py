"""What reading whole rows costs ``PaddedRows`` when the stored width is wider than
``context + 1`` (the default, which refuses a row with content past the first
``context + 1`` tokens) against ``truncate=True`` (only those are read): 8,192 uint16
``.npy`` rows stored 2,049 wide with content of 64-1,025 tokens and a 0/1 mask, context
1,024, B=32, sync loader (``prefetch=0``), A/B/A/B in one process, medians of the trials.

Prediction (before the first run): row reads copy twice the bytes and the tail adds two
reductions a file: 1.3-2x the time a batch under the full shuffle, less under
``shuffle="window"`` (whole windows are read either way; only the gather is wider).

Run: PYTHONPATH=src python benchmarks/rows_truncate.py [--trials 4] [--steps 300]
Both sides read the same batches: their SHA-256 digests are printed and must be equal.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from _out import out
from _timed import seconds_per_step, write_padded_rows

from headrace.formats import PaddedRows

ROWS, WIDTH, L = 8_192, 2_049, 1_024


def trial(root: Path, steps: int, shuffle: str, truncate: bool) -> tuple[float, str]:
    src = PaddedRows(
        root / "tok.npy", root / "mask.npy", context=L, shuffle=shuffle, truncate=truncate
    )
    return seconds_per_step(src, steps)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=4)
    ap.add_argument("--steps", type=int, default=300)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_padded_rows(root, ROWS, WIDTH, 50_000, L + 1)
        out("shuffle  side            median us/batch   per trial (us)              digest")
        for shuffle in ("full", "window"):
            trial(root, 40, shuffle, False)  # warm the page cache
            times: dict[bool, list[float]] = {False: [], True: []}
            digests: dict[bool, set[str]] = {False: set(), True: set()}
            for _ in range(args.trials):
                for truncate in (False, True):
                    s, d = trial(root, args.steps, shuffle, truncate)
                    times[truncate].append(s * 1e6)
                    digests[truncate].add(d)
            for truncate in (False, True):
                shown = " ".join(f"{t:.0f}" for t in times[truncate])
                side = "truncate=True" if truncate else "whole rows"
                out(
                    f"{shuffle:<8} {side:<15} {statistics.median(times[truncate]):>15.0f}   "
                    f"{shown:<26}  {','.join(sorted(digests[truncate]))}"
                )
            ratio = statistics.median(times[False]) / statistics.median(times[True])
            out(f"{shuffle}: whole rows / truncate=True = {ratio:.2f}")
            assert digests[False] == digests[True], "reading whole rows changed the batches"


if __name__ == "__main__":
    main()
