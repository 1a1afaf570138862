"""Memory stays bounded as the token file grows (DESIGN invariant 3, issue 2).

docs/bench.md measured it on ``headrace bench`` (peak RSS 569 MiB with a 1 GiB
file, 572 MiB with 4 GiB: two 256 MiB windows); here the same at a small scale,
in fresh processes reading a whole epoch of files 1x and 4x as large.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

MIB = 1 << 20

_CHILD = """
import sys
from headrace.bench._machine import peak_rss_bytes
from headrace.formats import TokenSource
from headrace.pipeline import Loader
from headrace.testing import batch_digest

path, max_windows = sys.argv[1], int(sys.argv[2])
src = TokenSource(path, dtype="uint32", context=255, window_bytes=1 << 20,
                  block_bytes=64 << 10, max_windows=max_windows)
steps = src.samples_per_epoch // 16
with Loader(src, batch_size=16, seed=3, steps=steps) as loader:
    digest = batch_digest(loader)  # every window of the file, once
print(peak_rss_bytes(), digest)
"""


def peak_rss_of_an_epoch(path: Path, max_windows: int) -> int:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path), str(max_windows)],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        timeout=120,
    ).stdout.split()
    return int(out[0])


def test_peak_rss_of_an_epoch_does_not_grow_with_the_file(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    for name, mib in (("small.bin", 8), ("big.bin", 32)):
        rng.integers(0, 2**31, mib * MIB // 4, dtype=np.uint32).tofile(tmp_path / name)
    small = peak_rss_of_an_epoch(tmp_path / "small.bin", max_windows=2)
    big = peak_rss_of_an_epoch(tmp_path / "big.bin", max_windows=2)
    # Two 1 MiB windows (and one read ahead), whatever the file: 24 MiB more file held
    # would be 24 MiB more RSS. (Measured 2c, 2026-12-03: 58.3, 60.7 and 63.2 MiB for
    # 8, 32 and 128 MiB files; 84.6 MiB for 32 MiB with every window kept.)
    assert big - small < 8 * MIB, (small, big)
    # The measure sees the windows: a source that keeps every one of them grows with it.
    kept = peak_rss_of_an_epoch(tmp_path / "big.bin", max_windows=64)
    assert kept - big > 16 * MIB, (big, kept)
