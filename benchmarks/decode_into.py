"""A batch of JPEGs decoded into the batch's array vs decoded one by one then stacked.

Run: PYTHONPATH=src python benchmarks/decode_into.py [--batch 8] [--size 640]
                                                     [--threads 2] [--rounds 40]

``--batch`` photo-like RGB JPEGs of ``--size`` x ``--size`` (quality 90, noise 80:
~300 KB at 640, the jpeg and hub-images workloads' images), decoded as a table's
image column decodes them (``TableImages.decode``, ``--threads`` decode threads):
"stack" with the slots turned off (each image its own array, then ``np.stack``),
"into" as shipped (simplejpeg decodes into the batch's slots). Sides alternate
batch by batch (A B B A ...); median ms per batch, the median of the paired ratios,
and each side's digest of its last batch (the same bytes on both sides) printed,
with the median page faults per batch (process-wide minor faults: fresh pages
touched) and the median time of ``np.stack`` alone on freshly decoded images.
"""

from __future__ import annotations

import argparse
import hashlib
import resource
import statistics
import time
from typing import Any

import numpy as np
from _out import out

from headrace.bench._files_kind import photo
from headrace.formats import decode_jpeg, encode
from headrace.formats._ragged import Ragged
from headrace.formats._table_images import TableImages


def _digest(a: np.ndarray[Any, Any]) -> str:
    return hashlib.sha256(f"{a.dtype.str}{a.shape}".encode() + a.tobytes()).hexdigest()[:12]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--size", type=int, default=640)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=40)
    args = ap.parse_args()
    blobs = [
        encode("jpeg", photo(i, (args.size, args.size, 3), 80), quality=90)
        for i in range(args.batch)
    ]
    sizes = np.array([len(b) for b in blobs])
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    values = Ragged(values=np.frombuffer(b"".join(blobs), np.uint8), offsets=offsets)
    names = [f"row {i}" for i in range(args.batch)]
    into = TableImages(mode=None, exif_transpose=False, threads=args.threads)
    stack = TableImages(mode=None, exif_transpose=False, threads=args.threads)
    stack._slots = lambda *_: None  # type: ignore[method-assign]
    sides = {"stack": stack, "into": into}
    times: dict[str, list[float]] = {k: [] for k in sides}
    faults: dict[str, list[int]] = {k: [] for k in sides}
    last: dict[str, np.ndarray[Any, Any]] = {}
    for k, ti in sides.items():  # warm-up: pools started, pages touched once
        last[k] = ti.decode("image", values, names)["image"]
    for r in range(args.rounds):
        order = list(sides) if r % 2 == 0 else list(sides)[::-1]
        for k in order:
            f = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            t = time.perf_counter()
            last[k] = sides[k].decode("image", values, names)["image"]
            times[k].append(time.perf_counter() - t)
            faults[k].append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f)
    copy = []
    for _ in range(args.rounds):
        images = [decode_jpeg(b, name="x") for b in blobs]  # fresh, as a batch's are
        t = time.perf_counter()
        np.stack(images)
        copy.append(time.perf_counter() - t)
    out(
        f"{args.batch} x {args.size}x{args.size} JPEGs ({int(sizes.mean()) // 1000} KB avg), "
        f"{args.threads} threads, {args.rounds} alternated rounds"
    )
    for k in sides:
        ms = statistics.median(times[k]) * 1e3
        pf = statistics.median(faults[k])
        out(f"  {k:5s} median {ms:7.2f} ms/batch, {pf:6.0f} page faults/batch  {_digest(last[k])}")
    ratios = [a / b for a, b in zip(times["stack"], times["into"], strict=True)]
    out(f"  stack/into paired median ratio {statistics.median(ratios):.3f}x")
    out(f"  np.stack alone: median {statistics.median(copy) * 1e3:.2f} ms/batch")
    for ti in sides.values():
        ti.close()


if __name__ == "__main__":
    main()
