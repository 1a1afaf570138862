"""MDS shards on a slow mount: a batch's shards read one after another vs side by side.

Under the global shuffle a batch of 32 samples from 16 shards touches about 14
shards, each a read of its own (and, the first time, one of its offsets table). Side
A reads them one after another (``MDSSource`` before 2026-12-03, kept here as a
subclass), side B side by side (the default: each shard's ranges by the engine, the
shards on the deep I/O pool).

Writes 16 shards of 256 samples (an ``int`` and 0.5-2 KiB of ``bytes`` each, ~5 MiB
in all) with the tests' writer of Streaming's format, mounts them through slowfs with
--latency-ms, and reads --batches batches of 32 with a Loader, A/B/A/B, each trial on
a fresh mount (cold). Reports median batches/s, the first batch's wait, the server's
max READs in flight, and a SHA-256 of every batch, which must be the same on both sides.

    PYTHONPATH=src python benchmarks/mds_slowfs.py --latency-ms 5 --open-latency-ms 5

Prediction, written before the first run (5 ms): A waits ~14 reads in series a batch
(~70-90 ms), B about one or two latencies (~10-20 ms, the reads overlapping as far as
slowfs serves them): 4-8x batches/s; the first batch (offsets tables too) alike.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from _slowfs_ab import alternate, fuse_missing, median, mount, one_digest, parser, table

from headrace.formats import MDSSource
from headrace.pipeline import Loader
from headrace.testing import batch_digest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from _mds_files import write_mds  # the tests' writer of Streaming's format

SHARDS, PER_SHARD = 16, 256


class OneAfterAnother(MDSSource):
    """Side A: each shard's ranges by the engine, one shard after another."""

    def _read_local(self, groups: Any, begin: Any, length: Any, paced: bool = True) -> Any:  # noqa: ARG002
        reader = self._reader.get()
        return [
            (idx, reader.read(self.files.name(f), np.stack([begin[idx], length[idx]], axis=1)))
            for f, idx in groups
        ]


def read(root: Path, batches: int, side: type[MDSSource]) -> tuple[float, float, str]:
    src = side(root)
    t0 = time.perf_counter()
    first: list[float] = []

    def timed(loader: Loader) -> Any:
        for b in loader:
            if not first:
                first.append(time.perf_counter() - t0)
            yield b

    with Loader(src, batch_size=32, seed=0, steps=batches) as ld:
        sha = batch_digest(timed(ld))
    return batches / (time.perf_counter() - t0), first[0], sha


def trial(src: Path, mnt: Path, args: argparse.Namespace, side: type[MDSSource]) -> dict[str, Any]:
    with mount(src, mnt, args) as m:
        bps, first, sha = read(m.mnt, args.batches, side)
        mif = m.stats()["max_in_flight"]
    return {"bps": bps, "first_s": first, "mif": mif, "sha": sha}


def main() -> int:
    args = parser(__doc__, 40).parse_args()
    if fuse_missing():
        return 0
    sides: dict[str, type[MDSSource]] = {
        "one after another": OneAfterAnother,
        "side by side": MDSSource,
    }
    rng = np.random.default_rng(0)
    samples = [
        {
            "y": k,
            "data": rng.integers(0, 256, int(rng.integers(512, 2048)), dtype=np.uint8).tobytes(),
        }
        for k in range(SHARDS * PER_SHARD)
    ]
    with tempfile.TemporaryDirectory(prefix="mds-slowfs-") as tmp:
        src = Path(tmp) / "src"
        write_mds(src, {"y": "int", "data": "bytes"}, samples, per_shard=PER_SHARD)
        res = alternate(sides, args.rounds, lambda s: trial(src, Path(tmp) / "mnt", args, s))
    digest = one_digest(res)
    if digest is None:
        return 1
    table(
        ["READ latency", "shards read", "batches/s", "first batch", "max READs in flight"],
        (
            [f"{args.latency_ms:g} ms", name, f"{median(xs, 'bps'):.2f}",
             f"{median(xs, 'first_s'):.3f} s", max(x["mif"] for x in xs)]
            for name, xs in res.items()
        ),
    )  # fmt: skip
    print(f"digest (both sides): {digest[:16]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
