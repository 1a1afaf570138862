"""Decode time per image with and without ``mode="RGB"``, where the image is RGB already.

Run: PYTHONPATH=src python benchmarks/image_mode.py [--rounds 8] [--reps 20]

A 640 x 640 photo-like RGB JPEG (quality 90) and the same image as an RGB PNG,
decoded ``rounds x reps`` times per side, sides alternated per decode (A B C D
D C B A ...), median milliseconds per image, the median of the paired ratios to
``None`` and each side's digest printed. Prediction: no difference between
``None`` and ``"RGB"`` (the same decode call; the mode check is a tuple lookup,
no conversion, no copy). ``"L"`` and
``"RGBA"`` are shown beside them for what a real conversion costs.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import time
from collections.abc import Callable

import numpy as np
from _out import out

from headrace.bench._files_kind import photo
from headrace.formats import decode_jpeg, decode_png, encode


def _digest(a: np.ndarray) -> str:
    return hashlib.sha256(f"{a.dtype.str}{a.shape}".encode() + a.tobytes()).hexdigest()[:12]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    img = photo(1, (640, 640, 3), 80)
    jpeg, png = encode("jpeg", img, quality=90), encode("png", img)
    cases: dict[str, dict[str, Callable[[], np.ndarray]]] = {}
    for path in ("simplejpeg", "pillow"):
        sj = path == "simplejpeg"
        cases[f"JPEG {path}"] = {
            mode or "None": (
                lambda m=mode, sj=sj: decode_jpeg(jpeg, name="a.jpg", mode=m, use_simplejpeg=sj)
            )
            for mode in (None, "RGB", "L", "RGBA")
        }
    cases["PNG pillow"] = {
        mode or "None": (lambda m=mode: decode_png(png, name="a.png", mode=m))
        for mode in (None, "RGB", "L", "RGBA")
    }
    out(f"JPEG {len(jpeg):,} bytes, PNG {len(png):,} bytes; {args.rounds * args.reps} decodes")
    for name, sides in cases.items():
        times: dict[str, list[float]] = {s: [] for s in sides}
        order = list(sides)
        # Alternated per decode (A B C D, then D C B A): on shared, noisy cores a burst
        # of other work lands on every side alike, not on one side's whole block.
        for r in range(args.rounds * args.reps):
            for side in order if r % 2 == 0 else order[::-1]:
                t = time.perf_counter()
                sides[side]()
                times[side].append((time.perf_counter() - t) * 1e3)
        base = times["None"]
        for side, ts in times.items():
            med = statistics.median(ts)
            paired = statistics.median(a / b for a, b in zip(ts, base, strict=True))
            out(
                f"{name:16} mode={side:5} median {med:7.3f} ms/image  x None {paired:5.3f} "
                f"(paired)  p10 {statistics.quantiles(ts, n=10)[0]:.3f}  "
                f"digest {_digest(sides[side]())}"
            )


if __name__ == "__main__":
    main()
