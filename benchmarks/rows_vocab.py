"""What ``PaddedRows(vocab_size=...)`` costs on the padded workload's shape (``headrace
bench -w padded``: 16,384 uint16 ``.npy`` rows of width 1025 and a 0/1 mask, context 1024,
B=32): the same rows read without and with the id check, A/B/A/B in one process, sync
loader (``prefetch=0``: the check's time is not hidden behind a read-ahead thread),
medians of the trials.

Prediction (before the first run): one unsigned max over each batch's stored tokens
(32 x 1025 uint16, 64 KiB) is ~10 us beside ~150-300 us of reading and assembling a
batch: a few % of a padded-row batch.

Run: PYTHONPATH=src python benchmarks/rows_vocab.py [--trials 7] [--steps 300]
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

VOCAB = 50_304  # the bench's datagen vocabulary
ROWS, WIDTH = 16_384, 1025


def trial(root: Path, steps: int, vocab: int | None) -> tuple[float, str]:
    src = PaddedRows(root / "tok.npy", root / "mask.npy", context=WIDTH - 1, vocab_size=vocab)
    return seconds_per_step(src, steps)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=7)
    ap.add_argument("--steps", type=int, default=300)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_padded_rows(root, ROWS, WIDTH, VOCAB, WIDTH)
        trial(root, 40, None)  # warm the page cache
        times: dict[int | None, list[float]] = {None: [], VOCAB: []}
        digests: dict[int | None, set[str]] = {None: set(), VOCAB: set()}
        for _ in range(args.trials):
            for vocab in (None, VOCAB):
                s, d = trial(root, args.steps, vocab)
                times[vocab].append(s * 1e6)
                digests[vocab].add(d)
        out("check   median us/batch   per trial (us)                      digest")
        for vocab in (None, VOCAB):
            shown = " ".join(f"{t:.0f}" for t in times[vocab])
            out(
                f"{'on' if vocab else 'off':>5}   {statistics.median(times[vocab]):>15.0f}   "
                f"{shown:<34}  {','.join(sorted(digests[vocab]))}"
            )
        ratio = statistics.median(times[VOCAB]) / statistics.median(times[None])
        out(f"on/off: {ratio:.3f}")
        assert digests[None] == digests[VOCAB], "the check changed the batches"


if __name__ == "__main__":
    main()
