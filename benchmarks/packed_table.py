"""Packing a tokenized Hugging Face dataset: headrace vs the `group_texts` pre-pass.

Run: PYTHONPATH=src python benchmarks/packed_table.py [--rows N] [--root DIR]

Writes a save_to_disk dataset of N rows (default 100,000) of 1-400 int32 token
ids (`datasets` writes it: state.json and Arrow IPC streams of 1,000-row
batches), then, for B=32 and L=1024, side by side:

  hf        what run_clm.py does: `ds.map(group_texts, batched=True)` concatenates
            and cuts the whole dataset into L + 1 blocks before training (a pass
            over every token, a second copy of the dataset written to disk), then
            batches of shuffled blocks by `lm[indices]` (numpy format).
  headrace  `TokenSource(table_token_files(DIR), context=L)` under a `Loader`:
            the same kind of samples (L + 1 consecutive tokens of the rows'
            concatenation), planned in closed form, read from the Arrow files.

Reports time to the first batch (the pre-pass or the opening included),
batches/s over STEPS steps after it (alternating trials, medians), bytes the
pre-pass wrote, and each side's digest (they differ by design: group_texts
cuts blocks at every 1,000-row map batch, in order; headrace permutes starts).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import time
from itertools import chain
from typing import Any

import datasets  # imported before any clock starts, as headrace is
import numpy as np
import pyarrow as pa
from _out import out

from headrace.formats import TokenSource, table_token_files
from headrace.pipeline import Loader

B, L, STEPS, TRIALS = 32, 1024, 1000, 5


def write(root: str, rows: int) -> None:
    rng = np.random.default_rng(0)
    lens = rng.integers(1, 401, rows)
    offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    ids = rng.integers(0, 50_000, int(offsets[-1]), dtype=np.int32)
    table = pa.table({"input_ids": pa.ListArray.from_arrays(pa.array(offsets), pa.array(ids))})
    datasets.Dataset(table).save_to_disk(root, num_shards=2)


def hf_open(root: str, cache: str) -> tuple[Any, int]:
    """run_clm.py's group_texts, blocks of L + 1 (x and the shifted y), numpy format."""
    ds = datasets.load_from_disk(root)
    block = L + 1

    def group_texts(examples: dict[str, list[Any]]) -> dict[str, list[Any]]:
        cat = list(chain(*examples["input_ids"]))
        total = len(cat) // block * block
        return {"input_ids": [cat[i : i + block] for i in range(0, total, block)]}

    lm = ds.map(
        group_texts,
        batched=True,
        cache_file_name=os.path.join(cache, "grouped.arrow"),
        desc=None,
    )
    written = sum(os.path.getsize(os.path.join(cache, f)) for f in os.listdir(cache))
    return lm.with_format("numpy"), written


def hf_batches(lm: Any, seed: int) -> Any:
    """Shuffled blocks, a fresh order each epoch (drop-last), as a DataLoader would."""
    for epoch in range(1 << 30):
        order = np.random.default_rng((seed, epoch)).permutation(len(lm))
        for i in range(0, len(order) - B + 1, B):
            ids = lm[order[i : i + B]]["input_ids"]
            yield {"x": ids[:, :-1], "y": ids[:, 1:]}


def headrace_batches(root: str) -> tuple[Any, Any]:
    # prefetch=0: the batches are made inside next(), not by a thread while hf is timed.
    src = TokenSource(table_token_files(root), context=L)
    loader = Loader(src, batch_size=B, seed=0, prefetch=0)
    return iter(loader), loader


def timed(it: Any, steps: int, h: Any) -> float:
    """Batches/s inside ``next`` only: digesting (~60 us a batch) stays out of the figure."""
    spent = 0.0
    for _ in range(steps):
        t0 = time.perf_counter()
        b = next(it)
        spent += time.perf_counter() - t0
        h.update(np.ascontiguousarray(b["x"]).data)
    return steps / spent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--root", default="/tmp/headrace-packed")
    args = ap.parse_args()
    root = os.path.join(args.root, f"ds-{args.rows}")
    if not os.path.exists(os.path.join(root, "state.json")):
        write(root, args.rows)
    size = sum(os.path.getsize(os.path.join(root, f)) for f in os.listdir(root))
    out(f"dataset: {args.rows:,} rows, {size / 1e6:,.1f} MB on disk; B={B}, L={L}")

    cache = os.path.join(args.root, "hf-cache")
    shutil.rmtree(cache, ignore_errors=True)
    os.makedirs(cache)
    t0 = time.perf_counter()
    lm, written = hf_open(root, cache)
    hf_it = hf_batches(lm, 0)
    next(hf_it)
    hf_first = time.perf_counter() - t0
    t0 = time.perf_counter()
    hr_it, loader = headrace_batches(root)
    next(hr_it)
    hr_first = time.perf_counter() - t0
    out(
        f"first batch: hf {hf_first:.2f} s (group_texts wrote {written / 1e6:,.1f} MB), "
        f"headrace {hr_first:.3f} s ({hf_first / hr_first:,.0f}x sooner)"
    )

    rates: dict[str, list[float]] = {"hf": [], "headrace": []}
    digests = {k: hashlib.sha256() for k in rates}
    for _ in range(TRIALS):  # A B A B ...
        rates["hf"].append(timed(hf_it, STEPS, digests["hf"]))
        rates["headrace"].append(timed(hr_it, STEPS, digests["headrace"]))
    loader.close()
    med = {k: statistics.median(v) for k, v in rates.items()}
    for k, v in rates.items():
        out(
            f"{k:9s} {med[k]:9,.0f} batches/s (min {min(v):,.0f}, max {max(v):,.0f}) "
            f"digest {digests[k].hexdigest()[:12]}"
        )
    out(f"headrace / hf: {med['headrace'] / med['hf']:.1f}x batches/s")
    shutil.rmtree(cache, ignore_errors=True)


if __name__ == "__main__":
    main()
