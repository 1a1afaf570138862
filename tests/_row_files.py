"""What the row and pair tests share: whether O_DIRECT works where they write, padded
token rows with loss masks, and the stored rows of a pair source's members (uint32
token files, 0 the padding)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from headrace.errors import ConfigError
from headrace.formats import write_row_file
from headrace.io import RangeReader


def odirect_works(path: Path) -> bool:
    """Whether an O_DIRECT read of ``path`` works (tmpfs and some overlays refuse it)."""
    try:
        with RangeReader("odirect") as r:
            r.read(str(path), [(0, 8)])
    except ConfigError:
        return False
    return True


def stored_groups(root: Path, rows: np.ndarray, widths: dict[str, int], n: int) -> dict:
    """Each member's stored ``rows`` (``{name}.tok.bin`` of ``n`` rows of ``widths[name]``
    uint32 tokens) as a pair source gives them: ``{name}_x`` and ``{name}_mask``."""
    out = {}
    for name, w in widths.items():
        tok = np.fromfile(root / f"{name}.tok.bin", dtype=np.uint32).reshape(n, w)[rows]
        out[f"{name}_x"] = tok
        out[f"{name}_mask"] = tok != 0
    return out


def padded_rows(
    root: Path, n: int, width: int, *, seed: int, prompt_mod: int, ext: str, empty_every: int
) -> tuple[Path, Path]:
    """``tok{ext}`` and ``mask{ext}`` in ``root``: ``n`` rows of ``width`` uint16 tokens,
    each right-padded with 0 after a random length of 16 or more, and its uint8 loss mask:
    1 from a prompt of 1 to ``prompt_mod`` tokens to the row's end; every
    ``empty_every``-th row (0: none) all 0 (nothing to learn from)."""
    rng = np.random.default_rng(seed)
    tok = rng.integers(1, 50_000, (n, width), dtype=np.uint16)
    lengths = rng.integers(16, width + 1, n)
    cols = np.arange(width)
    tok[cols[None, :] >= lengths[:, None]] = 0
    prompt = (lengths[:, None] // 3) % prompt_mod + 1
    mask = ((cols[None, :] >= prompt) & (cols[None, :] < lengths[:, None])).astype(np.uint8)
    if empty_every:
        mask[::empty_every] = 0
    write_row_file(root / f"tok{ext}", tok)
    write_row_file(root / f"mask{ext}", mask)
    return root / f"tok{ext}", root / f"mask{ext}"
