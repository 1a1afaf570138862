"""Packed SFT reads: what ``targets`` and ``labels`` cost a batch over plain packing.

Run: PYTHONPATH=src python benchmarks/packed_labels.py [--rows N] [--root DIR]

Writes a save_to_disk dataset of N rows (default 100,000) of 1-400 tokens, 2
shards, as a tokenizer's ``map`` saves an SFT set (``input_ids`` int32,
``labels`` int64, the first part of each row -100), then times
``TokenSource.read`` of B=32, L=1024 (the batches of one epoch, in order) for:

  plain     ``table_token_files(DIR)``, ``positions="documents"``: x, y, position_ids
  targets   ... and ``targets="documents"``: y a signed copy, -100 where it begins a row
  labels    ``table_token_files(DIR, labels="labels")`` with both: y from the labels

Each trial reads one whole epoch of each variant, alternating (A B C A B C ...)
after a warm-up epoch; reports the median over trials of each epoch's median
microseconds a batch (min, max) and a digest of each variant's batches (x, y,
position_ids, their dtypes): one digest a variant, the same every trial.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import time
import warnings

import datasets  # imported before any clock starts, as headrace is
import numpy as np
from _out import out

from headrace.formats import TokenSource, table_token_files

B, L, TRIALS = 32, 1024, 6


def write(root: str, rows: int) -> None:
    rng = np.random.default_rng(0)
    lens = rng.integers(1, 401, rows)
    offsets = np.concatenate([[0], np.cumsum(lens)])
    ids = rng.integers(0, 50_000, int(offsets[-1]), dtype=np.int32)
    labels = ids.astype(np.int64)
    prompt = (rng.random(rows) * lens).astype(np.int64)  # the first part of each row
    for start, p in zip(offsets[:-1].tolist(), prompt.tolist(), strict=True):
        labels[start : start + p] = -100
    feats = datasets.Features(
        {
            "input_ids": datasets.Sequence(datasets.Value("int32")),
            "labels": datasets.Sequence(datasets.Value("int64")),
        }
    )
    cut = offsets[1:-1]
    ds = datasets.Dataset.from_dict(
        {"input_ids": np.split(ids, cut), "labels": np.split(labels, cut)}, features=feats
    )
    ds.save_to_disk(root, num_shards=2)


def sources(root: str) -> dict[str, TokenSource]:
    return {
        "plain": TokenSource(table_token_files(root), context=L, positions="documents"),
        "targets": TokenSource(
            table_token_files(root), context=L, positions="documents", targets="documents"
        ),
        "labels": TokenSource(
            table_token_files(root, labels="labels"),
            context=L,
            positions="documents",
            targets="documents",
        ),
    }


def epoch(src: TokenSource) -> tuple[float, str]:
    """The median microseconds of ``read`` over the epoch's batches (digesting stays out;
    the median, not the mean: a shared machine's stalls stay out too), and the digest."""
    h = hashlib.sha256()
    n = src.samples_per_epoch // B
    spent = []
    for i in range(n):
        samples = np.arange(i * B, (i + 1) * B, dtype=np.int64)
        t0 = time.perf_counter()
        b = src.read(0, samples)
        spent.append(time.perf_counter() - t0)
        for k in ("x", "y", "position_ids"):
            h.update(k.encode() + str(b[k].dtype).encode())
            h.update(np.ascontiguousarray(b[k]).data)
    return statistics.median(spent) * 1e6, h.hexdigest()[:12]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--root", default="/tmp/headrace-packed")
    ap.add_argument("--trials", type=int, default=TRIALS)
    args = ap.parse_args()
    root = os.path.join(args.root, f"sft-{args.rows}")
    if not os.path.exists(os.path.join(root, "state.json")):
        write(root, args.rows)
    size = sum(os.path.getsize(os.path.join(root, f)) for f in os.listdir(root))
    with warnings.catch_warnings():  # plain and targets leave the labels unread: warned of
        warnings.simplefilter("ignore", UserWarning)
        srcs = sources(root)
    n = srcs["plain"].samples_per_epoch // B
    out(f"dataset: {args.rows:,} rows, {size / 1e6:,.1f} MB on disk; B={B}, L={L}, {n} batches")
    times: dict[str, list[float]] = {k: [] for k in srcs}
    digests: dict[str, set[str]] = {k: set() for k in srcs}
    for k, src in srcs.items():  # warm: windows read, document bounds loaded
        digests[k].add(epoch(src)[1])
    for _ in range(args.trials):  # A B C A B C ...
        for k, src in srcs.items():
            us, d = epoch(src)
            times[k].append(us)
            digests[k].add(d)
    for src in srcs.values():
        src.close()
    plain = statistics.median(times["plain"])
    for k, v in times.items():
        med = statistics.median(v)
        out(
            f"{k:8s} {med:7,.0f} us a batch (min {min(v):,.0f}, max {max(v):,.0f}; "
            f"{med / plain:.2f}x plain) digest {' '.join(sorted(digests[k]))}"
        )


if __name__ == "__main__":
    main()
