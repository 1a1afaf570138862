"""A folder of 40 NPY files of 4x3 float32 (file ``i`` holds ``i``), one cut short
(``TRUNCATED``) and one empty (``EMPTY``), checked unreadable by NumPy itself: what the
stock-DataLoader corrupt-news tests read under ``on_corrupt="replace"``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

TRUNCATED = "007.npy"
EMPTY = "023.npy"


def write_corrupt_npys(root: Path) -> Path:
    for i in range(40):
        np.save(root / f"{i:03d}.npy", np.full((4, 3), i, dtype=np.float32))
    whole = (root / TRUNCATED).read_bytes()
    (root / TRUNCATED).write_bytes(whole[: len(whole) - 20])
    (root / EMPTY).write_bytes(b"")
    for bad in (TRUNCATED, EMPTY):  # independently: NumPy cannot load either
        with pytest.raises((ValueError, EOFError)):
            np.load(root / bad)
    return root
