"""Tar shards under shuffle="samples": the bytes read by samples vs whole shards.

    PYTHONPATH=src python benchmarks/tar_samples.py [--rounds 2]

8 shards of 200 samples (a 30 kB ``bin`` member and a ``cls``) in a temporary folder;
16 batches of 32 under ``shuffle="samples"``, read by samples (the default) and a
whole shard a sample (``mode="map-style"``), alternated; ``stats.amplification`` is
the bytes read over the samples' bytes. Both sides must give the same batch digest.

Prediction (written before the first run): by samples about 1.2x (neighbouring members
joined across gaps of up to 64 KiB), whole shards 200x (a shard's 200 samples for one).
"""

from __future__ import annotations

import argparse
import io
import statistics
import tarfile
import tempfile
import time

import numpy as np
from _out import out

from headrace.formats import FileSource
from headrace.pipeline import Loader
from headrace.testing import batch_digest


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="tar-samples-") as root:
        rng = np.random.default_rng(0)
        for s in range(8):
            with tarfile.open(f"{root}/{s:04d}.tar", "w") as tar:
                for i in range(200):
                    for field, data in (("bin", rng.bytes(30_000)), ("cls", str(i).encode())):
                        info = tarfile.TarInfo(f"{i:05d}.{field}")
                        info.size = len(data)
                        tar.addfile(info, io.BytesIO(data))
        sides = {"by samples": "headrace", "whole shards": "map-style"}
        times: dict[str, list[float]] = {s: [] for s in sides}
        seen: dict[str, tuple[float, int]] = {}
        digests: set[str] = set()
        for r in range(args.rounds):
            for side in list(sides) if r % 2 == 0 else list(sides)[::-1]:
                src = FileSource(root, format="tar", shuffle="samples", mode=sides[side])
                t0 = time.perf_counter()
                with Loader(src, batch_size=32, seed=1, steps=16) as loader:
                    digests.add(batch_digest(loader)[:12])
                times[side].append(time.perf_counter() - t0)
                seen[side] = (src.stats.amplification, src.stats.bytes)
                src.close()
    for side, ts in times.items():
        amp, nbytes = seen[side]
        out(f"  {side:14s} {nbytes / 1e6:9.1f} MB read, {amp:6.2f}x, {statistics.median(ts):.3f}s")
    out(f"batch digests: {sorted(digests)}")
    return 0 if len(digests) == 1 else 1


if __name__ == "__main__":
    raise SystemExit(main())
