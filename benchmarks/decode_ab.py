"""Image decode time, this tree's ``decode_png``/``decode_jpeg`` beside a base commit's
(A/B, alternated).

Run: PYTHONPATH=src python benchmarks/decode_ab.py [--base REV] [--rounds 8] [--reps 20]

The base's ``formats/_images.py`` (``git show REV:...``, default ``HEAD~1``) is loaded
as a module of its own, so both sides run in one process on the same bytes. 640 x 640
photo-like PNGs: 8-bit grey, RGB and RGBA (must not regress: prediction, no difference,
the 8-bit path only gained a look at the IHDR's bit depth) and 16-bit RGB (the base
gives Pillow's high bytes, uint8; this tree every bit, uint16, by two decodes:
prediction ~2x the base); JPEGs of 300 KB: RGB (must not regress) and CMYK (this tree
checks the scan data with a strict decode before Pillow's: prediction ~1.7x).
Sides alternate per decode (A B, then B A); the median
milliseconds an image, the median of the paired ratios to the base, and each side's
digest are printed (8-bit: the same digest both sides).
"""

from __future__ import annotations

import argparse
import hashlib
import io
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
from headrace.formats import decode_jpeg, decode_png, encode

_SRC = "src/headrace/formats/_images.py"


def _digest(a: np.ndarray) -> str:
    return hashlib.sha256(f"{a.dtype.str}{a.shape}".encode() + a.tobytes()).hexdigest()[:12]


def _base(rev: str) -> types.ModuleType:
    root = Path(__file__).resolve().parent.parent
    text = subprocess.run(
        ["git", "show", f"{rev}:{_SRC}"], cwd=root, check=True, capture_output=True, text=True
    ).stdout
    mod = types.ModuleType("headrace.formats._images_base")
    sys.modules[mod.__name__] = mod
    exec(compile(text, f"{rev}:{_SRC}", "exec"), mod.__dict__)
    return mod


def _cmyk(rgb: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(rgb).convert("CMYK").save(buf, "JPEG", quality=90)
    return buf.getvalue()


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
        "JPEG RGB": encode("jpeg", rgb, quality=90),
        "JPEG CMYK": _cmyk(rgb),
    }
    out(f"{args.rounds * args.reps} decodes a side; base {args.base}")
    for name, data in files.items():
        fn = "decode_jpeg" if name.startswith("JPEG") else "decode_png"
        this: Callable[..., np.ndarray] = decode_jpeg if fn == "decode_jpeg" else decode_png
        then: Callable[..., np.ndarray] = getattr(base, fn)
        sides = {
            "base": lambda d=data, f=then: f(d, name="a"),
            "this": lambda d=data, f=this: f(d, name="a"),
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
