"""A folder of NPY files with non-ASCII names, and what the code that held a file listing as
lists (main at f0742377) read from it: shared by the local and S3 tests of the packed
listing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from headrace.formats import FileSource
from headrace.pipeline import Loader
from headrace.testing import batch_digest

# Non-ASCII names in several scripts, and a space: sorted by code point, as a list is.
NAMES = ["a/plain_00.npy", "a/plain_01.npy", "ä/é1.npy", "b/日本.npy", "b/z ü.npy", "c/Ω.npy"]
# What the code that held the listing as lists gave for this folder (main at f0742377):
# the batches of its first 5 steps, its fingerprint, and a state it saved at step 5.
OLD_DIGEST = "9c546f5ef9eb908e341e4d0c8079e4bab38861164512df68c666b05c47ddcbe4"
OLD_FINGERPRINT = "7e76bc5f29689d27d31ca26bc01bfdfc"
OLD_STATE = {
    "seed": 11,
    "step": 5,
    "batch_size": 3,
    "fingerprint": OLD_FINGERPRINT,
    "version": 2,
    "parts": {
        "settings:named": '{"kind":"files","format":"npy","shuffle":"samples","decode":true}',
        "files:named": (
            '{"count":6,"bytes":936,"files":[["a/plain_00.npy",{"bytes":136}],'
            '["a/plain_01.npy",{"bytes":144}],["b/z \\u00fc.npy",{"bytes":168}],'
            '["b/\\u65e5\\u672c.npy",{"bytes":160}],["c/\\u03a9.npy",{"bytes":176}],'
            '["\\u00e4/\\u00e91.npy",{"bytes":152}]]}'
        ),
        "kind": "fe454a772a2b",
        "keys": "8ffd1f1e56fb",
        "sizes": "e6aff8720366",
        "format": "f62d82cc3417",
        "samples_per_file": "aa7cc13dfb93",
        "shuffle": "6fe91fb20c82",
        "decode": "2f0cfb76dae7",
        "datasets": "a09965b15006",
    },
}


def write_names(root: Path, names: list[str] = NAMES) -> None:
    """``names`` below ``root``: file ``i`` holds ``i + 1`` rows of 4 ``int16``."""
    for i, n in enumerate(names):
        p = root / n
        p.parent.mkdir(parents=True, exist_ok=True)
        np.save(p, np.arange(4 * (i + 1), dtype=np.int16).reshape(-1, 4) * (i + 1))


def npy_source(root: Path | list[str] | str, **kw: Any) -> FileSource:
    return FileSource(root, format="npy", samples_per_file="header", shuffle="samples", **kw)


def first_digest(src: FileSource, steps: int = 5) -> str:
    """The digest of the first ``steps`` batches of 3, seed 11 (as ``OLD_DIGEST``'s)."""
    with Loader(src, batch_size=3, seed=11) as ld:
        it = iter(ld)
        return batch_digest(next(it) for _ in range(steps))
