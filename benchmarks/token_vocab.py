"""What ``TokenSource(vocab_size=...)`` costs: the same int32 Megatron file read without and
with the id check, A/B/A/B in one process, sync loader (``prefetch=0``: the check's time is
not hidden behind a read-ahead thread), medians of the trials.

Run: PYTHONPATH=src python benchmarks/token_vocab.py [--trials 5] [--steps 200]
Both sides read the same batches: their SHA-256 digests are printed and must be equal.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import numpy as np
from _out import out
from _timed import seconds_per_step

from headrace.formats import TokenSource, write_megatron_index

VOCAB = 128_000


def trial(path: Path, context: int, steps: int, vocab: int | None) -> tuple[float, str]:
    return seconds_per_step(TokenSource(path, context=context, vocab_size=vocab), steps)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--steps", type=int, default=200)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "web.bin"
        n = 16 << 20  # 64 MiB of int32 ids
        np.random.default_rng(0).integers(0, VOCAB, n).astype(np.int32).tofile(path)
        write_megatron_index(path.with_suffix(".idx"), np.int32, np.array([n]))
        out("context  check   median us/batch   per trial (us)                digest")
        for context in (2048, 8192):
            trial(path, context, 20, None)  # warm the page cache
            times: dict[int | None, list[float]] = {None: [], VOCAB: []}
            digests: dict[int | None, set[str]] = {None: set(), VOCAB: set()}
            for _ in range(args.trials):
                for vocab in (None, VOCAB):
                    s, d = trial(path, context, args.steps, vocab)
                    times[vocab].append(s * 1e6)
                    digests[vocab].add(d)
            for vocab in (None, VOCAB):
                shown = " ".join(f"{t:.0f}" for t in times[vocab])
                out(
                    f"{context:>7}  {'on' if vocab else 'off':>5}   "
                    f"{statistics.median(times[vocab]):>15.0f}   {shown:<28}  "
                    f"{','.join(sorted(digests[vocab]))}"
                )
            assert digests[None] == digests[VOCAB], "the check changed the batches"


if __name__ == "__main__":
    main()
