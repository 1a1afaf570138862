"""The same arrays written deflated (``np.savez_compressed``) and stored (``np.savez``),
for the NPZ inflation tests: ``files`` files ``f{i}.npz`` of ``n`` samples, ``x`` of
``side x side`` uint8 values below 8 (compressible) and ``y`` numbering them."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def write_pairs(
    root: Path, *, files: int, n: int, side: int, seed: int, y_step: int
) -> tuple[Path, Path]:
    """``root/deflated`` and ``root/stored``; file ``i``'s ``y`` is ``i * y_step + [0, n)``."""
    rng = np.random.default_rng(seed)
    deflated, stored = root / "deflated", root / "stored"
    deflated.mkdir()
    stored.mkdir()
    for i in range(files):
        x = rng.integers(0, 8, (n, side, side)).astype(np.uint8)
        y = np.arange(n, dtype=np.int64) + y_step * i
        np.savez_compressed(deflated / f"f{i}.npz", x=x, y=y)
        np.savez(stored / f"f{i}.npz", x=x, y=y)
    return deflated, stored
