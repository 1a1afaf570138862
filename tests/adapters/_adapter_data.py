"""Small token files and sources shared by the adapter tests and their subprocess scripts."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from headrace.formats import TokenSource

L = 16
WINDOW = 16 * 1024  # bytes: a few windows per file, so batches cross windows
BATCH = 8


def write_tokens(root: Path) -> Path:
    rng = np.random.default_rng(3)
    rng.integers(0, 1000, 20_000, dtype=np.uint32).tofile(root / "a.bin")
    rng.integers(0, 1000, 7_777, dtype=np.uint32).tofile(root / "b.bin")
    return root


def token_source(root: Path) -> TokenSource:
    return TokenSource(
        [root / "a.bin", root / "b.bin"],
        dtype="uint32",
        context=L,
        window_bytes=WINDOW,
        block_bytes=4096,
    )


# Sources the replay tests run over, by name (a subprocess gets the name).
SOURCES: dict[str, Callable[[Path], object]] = {"tokens": token_source}
