"""PNG decode time, this tree's ``decode_png`` beside a base commit's (A/B, alternated).

Run: PYTHONPATH=src python benchmarks/png16.py [--base REV] [--rounds 8] [--reps 20]

The base's ``formats/_images.py`` (``git show REV:...``, default ``HEAD~1``) is loaded
as a module of its own, so both sides run in one process on the same bytes. 640 x 640
photo-like PNGs: 8-bit grey, RGB and RGBA (must not regress: prediction, no difference,
the 8-bit path only gained a look at the IHDR's bit depth) and 16-bit RGB (the base
gives Pillow's high bytes, uint8; this tree every bit, uint16, by two decodes:
prediction ~2x the base). Sides alternate per decode (A B, then B A); the median
milliseconds an image, the median of the paired ratios to the base, and each side's
digest are printed (8-bit: the same digest both sides).
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import subprocess
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path

import numpy as np
from _out import out

from headrace.bench._files_kind import photo
from headrace.formats import decode_png, encode

_SRC = "src/headrace/formats/_images.py"


def _digest(a: np.ndarray) -> str:
    return hashlib.sha256(f"{a.dtype.str}{a.shape}".encode() + a.tobytes()).hexdigest()[:12]


def _base(rev: str) -> Callable[..., np.ndarray]:
    root = Path(__file__).resolve().parent.parent
    text = subprocess.run(
        ["git", "show", f"{rev}:{_SRC}"], cwd=root, check=True, capture_output=True, text=True
    ).stdout
    mod = types.ModuleType("headrace.formats._images_base")
    sys.modules[mod.__name__] = mod
    exec(compile(text, f"{rev}:{_SRC}", "exec"), mod.__dict__)
    return mod.decode_png  # type: ignore[no-any-return]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", default="HEAD~1")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    base = _base(args.base)
    rgb = photo(1, (640, 640, 3), 80)
    rgba = np.concatenate([rgb, photo(2, (640, 640, 1), 80)], axis=2)
    rgb16 = rgb.astype(np.uint16) * 257 + np.arange(640, dtype=np.uint16)[:, None, None]
    files = {
        "8-bit grey": encode("png", rgb[:, :, :1]),
        "8-bit RGB": encode("png", rgb),
        "8-bit RGBA": encode("png", rgba),
        "16-bit RGB": encode("png", rgb16),
    }
    out(f"{args.rounds * args.reps} decodes a side; base {args.base}")
    for name, data in files.items():
        sides = {
            "base": lambda d=data: base(d, name="a.png"),
            "this": lambda d=data: decode_png(d, name="a.png"),
        }
        times: dict[str, list[float]] = {s: [] for s in sides}
        order = list(sides)
        for r in range(args.rounds * args.reps):
            for side in order if r % 2 == 0 else order[::-1]:
                t = time.perf_counter()
                sides[side]()
                times[side].append((time.perf_counter() - t) * 1e3)
        paired = statistics.median(a / b for a, b in zip(times["this"], times["base"], strict=True))
        digests = {s: _digest(f()) for s, f in sides.items()}
        out(
            f"{name:11} {len(data):>9,} B  base {statistics.median(times['base']):7.3f} ms "
            f"({digests['base']})  this {statistics.median(times['this']):7.3f} ms "
            f"({digests['this']})  this/base {paired:5.3f} (paired)"
        )


if __name__ == "__main__":
    main()
