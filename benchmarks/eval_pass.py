"""What an exact pass's marks cost: ``Loader(epochs=1)`` against ``steps=ceil(n / B)``.

    python benchmarks/eval_pass.py [--root DIR] [--batch 32] [--trials 5]

Writes (once) a 32 MiB uint16 ``val.bin`` and two files of 40,000 padded rows of 129
tokens, then reads one pass of each source (the token file, unshuffled, L=1024; a
50/50 ``Mixture`` of the two row sets) with ``prefetch=0``, the two sides in
alternating order after one warm-up each. Reports the median microseconds per batch,
the ratio, and the SHA-256 of each side's ``x`` (first row of every batch), which
must be equal: the marks are added beside the source's arrays, never in them.

Then a sliding-window pass over the token file, ``stride=L/2`` against ``stride=L``
(alternating, one warm-up each): the median milliseconds per pass and per 1,000
samples, the ratio per pass, each side's digest (first row of ``x`` and the
``loss_mask`` count of every batch), which must be one per side over the trials,
and the targets each side counted, which must both be every token but the first.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from headrace.formats import PaddedRows, TokenSource
from headrace.pipeline import Loader, Mixture


def write(root: Path) -> None:
    rng = np.random.default_rng(0)
    if not (root / "val.bin").exists():
        rng.integers(0, 50_000, 1 << 24, dtype=np.uint16).tofile(root / "val.bin")
    for i in range(2):
        if not (root / f"r{i}.npy").exists():
            rows = rng.integers(1, 1000, (40_000, 129), dtype=np.uint16)
            np.save(root / f"m{i}.npy", np.ones_like(rows, dtype=np.uint8))
            np.save(root / f"r{i}.npy", rows)


def run(src: Any, n: int, batch: int, exact: bool) -> tuple[float, str, int]:
    end: dict[str, int] = {"epochs": 1} if exact else {"steps": -(-n // batch)}
    h = hashlib.sha256()
    k = 0
    t0 = time.perf_counter()
    with Loader(src, batch_size=batch, prefetch=0, **end) as loader:
        for b in loader:
            h.update(b["x"][:1].tobytes())
            k += 1
    return (time.perf_counter() - t0) / k * 1e6, h.hexdigest()[:12], k


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=None)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--trials", type=int, default=5)
    args = ap.parse_args()
    root = args.root or Path(tempfile.mkdtemp(prefix="eval-pass-"))
    write(root)
    b = args.batch

    def tokens() -> tuple[Any, int]:
        src = TokenSource(root / "val.bin", context=1024, shuffle=False)
        return src, src.samples_per_epoch

    def mixture() -> tuple[Any, int]:
        rows = [
            PaddedRows(root / f"r{i}.npy", root / f"m{i}.npy", context=128, empty_rows="keep")
            for i in range(2)
        ]
        return Mixture(rows, [0.5, 0.5], batch_size=b), sum(r.samples_per_epoch for r in rows)

    sides: dict[str, Callable[[], tuple[Any, int]]] = {"tokens": tokens, "mixture": mixture}
    for name, make in sides.items():
        times: dict[bool, list[float]] = {False: [], True: []}
        digests: dict[bool, set[str]] = {False: set(), True: set()}
        for trial in range(args.trials + 1):
            for exact in (False, True):
                us, digest, _ = run(*make(), b, exact)
                digests[exact].add(digest)
                if trial:  # the first is warm-up
                    times[exact].append(us)
        plain, marked = statistics.median(times[False]), statistics.median(times[True])
        same = digests[False] == digests[True] and len(digests[False]) == 1
        print(
            f"{name}: steps= {plain:.1f} us/batch, epochs=1 {marked:.1f} us/batch "
            f"({marked / plain:.3f}x); digests {sorted(digests[False])} vs "
            f"{sorted(digests[True])} ({'equal' if same else 'DIFFER'})"
        )
    compare_strides(root, b, args.trials)


def strided(root: Path, batch: int, stride: int) -> tuple[float, str, int, int]:
    """One ``epochs=1`` pass at ``stride``: seconds, digest, samples, targets counted."""
    src = TokenSource(root / "val.bin", context=1024, shuffle=False, stride=stride)
    n = src.samples_per_epoch
    h = hashlib.sha256()
    counted = 0
    t0 = time.perf_counter()
    with Loader(src, batch_size=batch, prefetch=0, epochs=1) as loader:
        for b in loader:
            ok = b["valid"][:, None] & b["loss_mask"]
            k = int(ok.sum())
            h.update(b["x"][:1].tobytes())
            h.update(k.to_bytes(8, "little"))
            counted += k
    return time.perf_counter() - t0, h.hexdigest()[:12], n, counted


def compare_strides(root: Path, batch: int, trials: int) -> None:
    sides = (1024, 512)  # A: windows that do not overlap; B: half a window apart
    times: dict[int, list[float]] = {s: [] for s in sides}
    digests: dict[int, set[str]] = {s: set() for s in sides}
    info: dict[int, tuple[int, int]] = {}
    for trial in range(trials + 1):
        for stride in sides:
            sec, digest, n, counted = strided(root, batch, stride)
            digests[stride].add(digest)
            info[stride] = (n, counted)
            if trial:  # the first is warm-up
                times[stride].append(sec)
    a, b = (statistics.median(times[s]) for s in sides)
    for s, med in zip(sides, (a, b), strict=True):
        n, counted = info[s]
        print(
            f"stride={s}: {med * 1e3:.1f} ms/pass, {med / n * 1e6:.1f} ms/1k samples, "
            f"{n} samples, {counted} targets counted, digests {sorted(digests[s])}"
        )
    print(f"stride=512 / stride=1024: {b / a:.2f}x per pass")


if __name__ == "__main__":
    main()
