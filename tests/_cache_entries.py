"""Real object-cache entries for the ``headrace cache`` tests: ``n`` blobs written
through :class:`~headrace.io.ObjectCache`, each under its own key, size and tag."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from headrace.io import ObjectCache


def blob(n: int, seed: int = 0) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def fill(root: Path, n: int) -> tuple[ObjectCache, list[Path]]:
    """A cache at ``root`` holding ``n`` entries; their files' paths."""
    c = ObjectCache(root)
    paths = []
    for i in range(n):
        assert c.write(f"|s3://b/o{i}", 300 + i, "e", blob(300 + i, i))
        paths.append(Path(c.path(f"|s3://b/o{i}", 300 + i, "e")))
    return c, paths
