"""What the row and pair tests share: whether O_DIRECT works where they write, and the
stored rows of a pair source's members (uint32 token files, 0 the padding)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from headrace.errors import ConfigError
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
