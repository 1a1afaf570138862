"""JPEGs in a table (datasets' ``Image()`` layout) vs the same JPEGs as files: images/s.

    python benchmarks/table_images.py [--root DIR] [--images 2048] [--size 512]
                                      [--batch 64] [--trials 3] [--threads N]
                                      [--interleave EPOCHS]

Writes (once) ``--images`` JPEGs of ``--size`` x ``--size`` (about 100 KB each at
512) as files, as one Parquet file of 100-row groups (``struct<bytes, path>`` +
``label``, the ``huggingface`` metadata ``to_parquet`` writes) and as an Arrow IPC
stream (a ``save_to_disk`` shard's layout), all on local disk (the page cache,
after a warm-up epoch each). Then one epoch per side per trial, sides in
alternating order (A/B/C, C/B/A, ...): ``FileSource(format="jpeg")`` and
``TableSource`` (image column decoded), ``Loader(batch_size=--batch)``, default
decode threads unless ``--threads``. Reports each side's median images/s, its
ratio to the files, each side's stream digest (the same in every trial) and
whether the sides' images are the same set (sorted per-image digests of the
pixels: the orders differ, the pixels must not). ``--interleave K``: then K
epochs with every side's loader stepped a batch at a time in turn (``prefetch=0``),
each side timed on its own reads, which spreads other processes' load alike.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
from _out import out

from headrace.formats import (
    FileSource,
    TableSource,
    decode_jpeg,
    encode_jpeg,
    synthetic_arrays,
)
from headrace.formats._file_decode import default_decode_threads
from headrace.formats._file_samples import sample_digests
from headrace.pipeline import Loader
from headrace.testing import update_digest

_HF = json.dumps(
    {"info": {"features": {"image": {"_type": "Image"}, "label": {"dtype": "int64"}}}}
).encode()


def ensure(root: Path, n: int, size: int) -> None:
    files = root / "files"
    if (root / "t.arrow").exists():
        return
    files.mkdir(parents=True, exist_ok=True)
    blobs = []
    for i in range(n):
        data = encode_jpeg(synthetic_arrays("jpeg", seed=i, shape=(size, size, 3)), quality=90)
        (files / f"img{i:05d}.jpg").write_bytes(data)
        blobs.append(data)
    struct = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    table = pa.table(
        {
            "image": pa.array([{"bytes": b, "path": None} for b in blobs], struct),
            "label": np.arange(n, dtype=np.int64),
        }
    ).replace_schema_metadata({"huggingface": _HF})
    pq.write_table(table, root / "t.parquet", row_group_size=100)
    with ipc.new_stream(root / "t.arrow", table.schema) as w:
        w.write_table(table, max_chunksize=100)
    mb = sum(len(b) for b in blobs) / n / 1e3
    out(f"wrote {n} JPEGs of {size}x{size}, {mb:.0f} KB each on average, under {root}")


def source(root: Path, side: str, threads: int | None) -> Any:
    if side == "files":
        return FileSource(root / "files", format="jpeg", decode_threads=threads)
    return TableSource(root / f"t.{side}", decode_threads=threads)


def epoch(root: Path, side: str, a: argparse.Namespace) -> tuple[float, str, list[str]]:
    steps = a.images // a.batch
    h = hashlib.sha256()
    pixels: list[str] = []
    t0 = time.perf_counter()
    with Loader(source(root, side, a.threads), batch_size=a.batch, seed=1, steps=steps) as ld:
        batches = list(ld)
    seconds = time.perf_counter() - t0
    for b in batches:
        update_digest(h, b)
        pixels.extend(sample_digests({"image": b["image"]}))
    return steps * a.batch / seconds, h.hexdigest()[:12], sorted(pixels)


def decode_only(root: Path, a: argparse.Namespace) -> float:
    """Images/s of decoding the JPEGs' bytes alone, held in memory, on as many threads
    as the sources decode on: what a decode-bound reader would reach."""
    blobs = [p.read_bytes() for p in sorted((root / "files").iterdir())]
    threads = default_decode_threads() if a.threads is None else max(a.threads, 1)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda b: decode_jpeg(b, name="x"), blobs))
    return len(blobs) / (time.perf_counter() - t0)


def interleaved(root: Path, sides: list[str], a: argparse.Namespace) -> dict[str, float]:
    """One epoch of every side at once, a batch of each in turn (``prefetch=0``: each
    read on this thread, its decodes on the decode threads), so that load from other
    processes falls on every side alike: images/s per side from its reads' times."""
    steps = a.images // a.batch
    loaders = {
        s: Loader(source(root, s, a.threads), batch_size=a.batch, seed=1, steps=steps, prefetch=0)
        for s in sides
    }
    its = {s: iter(ld) for s, ld in loaders.items()}
    spent = dict.fromkeys(sides, 0.0)
    for t in range(steps):
        for s in sides if t % 2 == 0 else sides[::-1]:
            t0 = time.perf_counter()
            next(its[s])
            spent[s] += time.perf_counter() - t0
    for ld in loaders.values():
        ld.close()
    return {s: steps * a.batch / spent[s] for s in sides}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, default=Path("/tmp/headrace-table-images"))
    ap.add_argument("--images", type=int, default=2048)
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--interleave", type=int, default=0, help="epochs of batches in turn")
    a = ap.parse_args()
    ensure(a.root, a.images, a.size)
    sides = ["files", "parquet", "arrow"]
    for side in sides:  # warm-up: the page cache, imports, thread pools
        epoch(a.root, side, a)
    rates: dict[str, list[float]] = {s: [] for s in sides}
    alone: list[float] = []
    digests: dict[str, set[str]] = {s: set() for s in sides}
    pixels: dict[str, list[str]] = {}
    for t in range(a.trials):
        for side in sides if t % 2 == 0 else sides[::-1]:
            rate, digest, seen = epoch(a.root, side, a)
            rates[side].append(rate)
            digests[side].add(digest)
            pixels[side] = seen
        alone.append(decode_only(a.root, a))
    steps = a.images // a.batch
    out(
        f"{steps * a.batch} of {a.images} JPEGs ({a.size}x{a.size}), batch {a.batch}, "
        f"{a.trials} trials alternating, decode threads {a.threads or 'default'}"
    )
    out("| side | images/s (median) | trials | vs files | stream digest |")
    out("|---|---|---|---|---|")
    base = statistics.median(rates["files"])
    for side in sides:
        med = statistics.median(rates[side])
        trials = " ".join(f"{r:,.0f}" for r in rates[side])
        digest = ",".join(sorted(digests[side]))
        out(f"| {side} | {med:,.0f} | {trials} | {med / base:.2f} | {digest} |")
    if a.interleave:
        per: dict[str, list[float]] = {s: [] for s in sides}
        for _ in range(a.interleave):
            for side, rate in interleaved(a.root, sides, a).items():
                per[side].append(rate)
        out(f"interleaved, a batch of each side in turn, prefetch=0, {a.interleave} epochs:")
        out("| side | images/s (median) | epochs | vs files |")
        out("|---|---|---|---|")
        ib = statistics.median(per["files"])
        for side in sides:
            med = statistics.median(per[side])
            rs = " ".join(f"{r:,.0f}" for r in per[side])
            out(f"| {side} | {med:,.0f} | {rs} | {med / ib:.2f} |")
    out(
        f"decoding alone (bytes in memory, same threads): {statistics.median(alone):,.0f} "
        f"images/s (trials {' '.join(f'{r:,.0f}' for r in alone)})"
    )
    same = len({tuple(p) for p in pixels.values()}) == 1
    stable = all(len(d) == 1 for d in digests.values())
    out("every side decoded the same pixels:", same, "; each side one digest:", stable)
    return 0 if same and stable else 1


if __name__ == "__main__":
    sys.exit(main())
