"""JPEG batches on a many-core machine: images/s by decode threads and resize threads.

    python benchmarks/decode_threads.py [--root DIR] [--images 2048] [--batch 32]
                                        [--decode 2 8 16] [--resize 2 8] [--trials 2]

Writes (once, with a process pool) ``--images`` JPEGs of 640 x 640 under
``--root``, then reads one epoch per setting, settings in alternating order
per trial: ``FileSource(decode_threads=d)`` + ``Loader(transform=
RandomResizedCrop((224, 224)))`` with ``transforms.set_resize_threads(r)``
(and ``r = 0``: no transform, decoding only). Reports median images/s per
setting and the SHA-256 of each setting's batches: every setting with the
transform must give the same digest (threads change speed, never bytes).
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from _out import out

import headrace.transforms as tr
from headrace.formats import FileSource, synthetic_arrays, write_sample_file
from headrace.pipeline import Loader
from headrace.testing import update_digest


def _write(path: str, seed: int) -> None:
    write_sample_file("jpeg", path, synthetic_arrays("jpeg", seed=seed, shape=(640, 640, 3)))


def ensure(root: Path, n: int) -> None:
    root.mkdir(parents=True, exist_ok=True)
    todo = [(str(root / f"img{i:05d}.jpg"), i) for i in range(n)]
    todo = [(p, i) for p, i in todo if not Path(p).exists()]
    if todo:
        with ProcessPoolExecutor() as pool:
            list(pool.map(_write, *zip(*todo, strict=True)))


def epoch(root: Path, a: argparse.Namespace, decode: int, resize: int) -> tuple[float, str]:
    if resize:
        tr.set_resize_threads(resize)
    src = FileSource(root, format="jpeg", decode_threads=decode)
    transform = tr.RandomResizedCrop((224, 224)) if resize else None
    h = hashlib.sha256()
    steps = a.images // a.batch
    t0 = time.perf_counter()
    with Loader(src, batch_size=a.batch, seed=1, steps=steps, transform=transform) as ld:
        batches = list(ld)
    seconds = time.perf_counter() - t0
    for b in batches:
        update_digest(h, b)
    return steps * a.batch / seconds, h.hexdigest()[:12]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, default=Path("/tmp/headrace-decode-jpegs"))
    ap.add_argument("--images", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--decode", type=int, nargs="+", default=[2, 8, 16])
    ap.add_argument("--resize", type=int, nargs="+", default=[2, 8])
    ap.add_argument("--trials", type=int, default=2)
    a = ap.parse_args()
    ensure(a.root, a.images)
    settings = [(d, r) for d in a.decode for r in [0, *a.resize]]
    rates: dict[tuple[int, int], list[float]] = {s: [] for s in settings}
    digests: dict[tuple[int, int], set[str]] = {s: set() for s in settings}
    for t in range(a.trials):
        for s in settings if t % 2 == 0 else settings[::-1]:
            rate, digest = epoch(a.root, a, *s)
            rates[s].append(rate)
            digests[s].add(digest)
    out(f"{a.images} JPEGs of 640x640, batch {a.batch}, {a.trials} trials alternating")
    out("| decode threads | resize threads | images/s | digest |")
    out("|---|---|---|---|")
    for (d, r), rs in rates.items():
        what = "- (decode only)" if r == 0 else str(r)
        digest = ",".join(sorted(digests[(d, r)]))
        out(f"| {d} | {what} | {statistics.median(rs):,.0f} | {digest} |")
    cropped = set().union(*(v for (_, r), v in digests.items() if r))
    out("every setting with the crop gave one digest:", len(cropped) == 1)
    return 0 if len(cropped) == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
