"""What a per-sample transform costs: JPEG batches with and without crops, A/B/A/B.

    python benchmarks/transform_crop.py [--root DIR] [--images 512] [--batch 16]
                                        [--crop 224] [--trials 3] [--workers 2]

Writes (once) ``--images`` JPEGs of 640 x 640 under ``--root`` unless they
exist, then reads one epoch per side per trial, sides in alternating order:

``decode``        FileSource + Loader, no transform (the images as decoded)
``crop``          the same with ``transform=RandomCrop((crop, crop))``
``crop-workers``  ``HeadraceDataLoader(num_workers=--workers)`` with the same transform
``resized-crop``  ``transform=RandomResizedCrop((crop, crop))`` (resized with Pillow)

Reports median images/s, the transform's share of the loader's time, and a
SHA-256 digest per side: both crop sides must agree (a sample's crop depends
only on the seed and its sample number, not on who reads it).
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from headrace.formats import FileSource, synthetic_arrays, write_sample_file
from headrace.pipeline import Loader
from headrace.testing import update_digest
from headrace.transforms import RandomCrop, RandomResizedCrop


def ensure(root: Path, n: int) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        path = root / f"img{i:05d}.jpg"
        if not path.exists():
            write_sample_file("jpeg", path, synthetic_arrays("jpeg", seed=i, shape=(640, 640, 3)))
    return root


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, default=Path("/tmp/headrace-transform-jpegs"))
    ap.add_argument("--images", type=int, default=512)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--crop", type=int, default=224)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args(argv)
    root = ensure(a.root, a.images)
    steps = a.images // a.batch
    crop = RandomCrop((a.crop, a.crop))

    def bare(transform: Any) -> tuple[float, str, float]:
        src = FileSource(root, format="jpeg")
        h = hashlib.sha256()
        t0 = time.perf_counter()
        with Loader(src, batch_size=a.batch, seed=0, steps=steps, transform=transform) as ld:
            for b in ld:
                update_digest(h, b)
            share = ld.stats.transform_s / max(1e-9, ld.stats.source_s + ld.stats.transform_s)
        return time.perf_counter() - t0, h.hexdigest(), share

    def workers(transform: Any) -> tuple[float, str, float]:
        from headrace.torch import HeadraceDataLoader, TorchDataset

        ds = TorchDataset(
            FileSource(root, format="jpeg"),
            batch_size=a.batch,
            seed=0,
            steps=steps,
            transform=transform,
        )
        h = hashlib.sha256()
        t0 = time.perf_counter()
        with HeadraceDataLoader(ds, num_workers=a.workers) as dl:
            for b in dl:
                update_digest(h, {k: v.numpy() for k, v in b.items()})
        return time.perf_counter() - t0, h.hexdigest(), float("nan")

    sides = {
        "decode": lambda: bare(None),
        "crop": lambda: bare(crop),
        "crop-workers": lambda: workers(crop),
        "resized-crop": lambda: bare(RandomResizedCrop((a.crop, a.crop))),
    }
    times: dict[str, list[float]] = {s: [] for s in sides}
    digests: dict[str, set[str]] = {s: set() for s in sides}
    shares: dict[str, list[float]] = {"crop": [], "resized-crop": []}
    bare(None)  # warm the page cache
    for t in range(a.trials):
        for name in sides if t % 2 == 0 else list(sides)[::-1]:
            seconds, digest, share = sides[name]()
            times[name].append(seconds)
            digests[name].add(digest)
            if name in shares:
                shares[name].append(share)
    print(
        f"{a.images} JPEGs of 640x640, batch {a.batch}, crop {a.crop}x{a.crop}, "
        f"{a.trials} trials alternating"
    )
    print(f"{'side':13} {'images/s':>9} {'x decode':>9}  digest")
    base = statistics.median(times["decode"])
    for name in sides:
        med = statistics.median(times[name])
        d = digests[name]
        shown = next(iter(d))[:12] if len(d) == 1 else f"{len(d)} different!"
        print(f"{name:13} {steps * a.batch / med:>9.1f} {base / med:>9.2f}  {shown}")
    for name, got in shares.items():
        print(f"transform share of the loader's time ({name}): {statistics.median(got):.1%}")
    same = digests["crop"] == digests["crop-workers"] and len(digests["crop"]) == 1
    print(f"crop digests equal with and without workers: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
