"""A mixture of tables on a slow mount: its sources read one after another vs side by side.

A ``Mixture`` reads each chunk's samples source by source. On a network mount
every source's read is a few round trips (a local Arrow table fills its rows'
pages in two rounds: offsets, then values), so a mixture of N sources waits N
times as long as one. Side A reads the sources one after another (every
release up to this one: ``_mixture._SIDE_BY_SIDE = False``), side B side by
side (the default).

Writes two ``save_to_disk``-style folders (Arrow streams + ``state.json``,
32,768 rows each of 256-1,792 int32 ids and a label, ~128 MiB each), mounts
their parent through slowfs with --read-latency-ms, and reads --batches
batches of 32 from ``Mixture([TableSource(a), TableSource(b)], [0.5, 0.5])``
with a Loader, A/B/A/B, each trial on a fresh mount (cold). Reports median
batches/s, the first batch's wait, the server's max READs in flight, and a
SHA-256 of every batch, which must be the same on both sides.

    PYTHONPATH=src python benchmarks/mixture_slowfs.py --latency-ms 20

Prediction, written before the first run (20 ms): a chunk's read is two
sources' fills, each 2-3 round trips plus the gather; side by side the two
fills overlap, so B reads a chunk in about half A's time: 1.7-1.9x batches/s.
On page-cached data (``--cached``) B pays a thread hand-off per source per
chunk (tens of microseconds against milliseconds of reading): within the spread.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from _slowfs_ab import alternate, fuse_missing, median, mount, one_digest, parser, table

import headrace.pipeline._mixture as mixture
from headrace.formats import TableSource
from headrace.pipeline import Loader, Mixture

ROWS = 32_768


def write(root: Path, name: str, seed: int) -> None:
    folder = root / name
    folder.mkdir()
    rng = np.random.default_rng(seed)
    lens = rng.integers(256, 1792, ROWS)
    offs = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    vals = rng.integers(0, 50_000, int(offs[-1]), dtype=np.int32)
    t = pa.table(
        {
            "ids": pa.ListArray.from_arrays(pa.array(offs), pa.array(vals)),
            "label": pa.array(rng.integers(0, 10, ROWS)),
        }
    )
    shard = "data-00000-of-00001.arrow"
    with pa.OSFile(str(folder / shard), "wb") as f, pa.ipc.new_stream(f, t.schema) as w:
        w.write_table(t, max_chunksize=1000)
    (folder / "state.json").write_text(json.dumps({"_data_files": [{"filename": shard}]}))


def read(root: Path, batches: int) -> tuple[float, float, str]:
    """(batches/s, first batch s, SHA-256 of every batch) of the mixture under ``root``."""
    mix = Mixture(
        [TableSource(root / "a", width=1792), TableSource(root / "b", width=1792)],
        [0.5, 0.5],
        batch_size=32,
    )
    h = hashlib.sha256()
    t0 = time.perf_counter()
    first = 0.0
    with Loader(mix, batch_size=32, steps=batches) as ld:
        for i, b in enumerate(ld):
            if i == 0:
                first = time.perf_counter() - t0
            for k in sorted(b):
                h.update(np.ascontiguousarray(b[k]).tobytes())
    took = time.perf_counter() - t0
    mix.close()
    return batches / took, first, h.hexdigest()


def trial(src: Path, mnt: Path, args: argparse.Namespace, side: bool) -> dict[str, Any]:
    mixture._SIDE_BY_SIDE = side
    if args.cached:
        bps, first, sha = read(src, args.batches)
        return {"bps": bps, "first_s": first, "mif": 0, "sha": sha}
    with mount(src, mnt, args) as m:
        bps, first, sha = read(m.mnt, args.batches)
        mif = m.stats()["max_in_flight"]
    return {"bps": bps, "first_s": first, "mif": mif, "sha": sha}


def main() -> int:
    ap = parser(__doc__, 24)
    ap.add_argument("--cached", action="store_true", help="page-cached local folders")
    args = ap.parse_args()
    if not args.cached and fuse_missing():
        return 0
    sides = {"one after another": False, "side by side": True}
    with tempfile.TemporaryDirectory(prefix="mixture-slowfs-") as tmp:
        src = Path(tmp) / "src"
        src.mkdir()
        write(src, "a", 1)
        write(src, "b", 2)
        res = alternate(sides, args.rounds, lambda b: trial(src, Path(tmp) / "mnt", args, b))
    digest = one_digest(res)
    if digest is None:
        return 1
    where = "page cache" if args.cached else f"{args.latency_ms:g} ms"
    table(
        ["READ latency", "sources read", "batches/s", "first batch", "max READs in flight"],
        (
            [where, name, f"{median(xs, 'bps'):.2f}", f"{median(xs, 'first_s'):.2f} s",
             max(x["mif"] for x in xs)]
            for name, xs in res.items()
        ),
    )  # fmt: skip
    print(f"digest (both sides): {digest[:16]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
