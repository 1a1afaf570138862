"""Local Arrow (``save_to_disk``) on a slow mount: a batch's pages filled in parallel first.

A local Arrow table is memory-mapped and its rows gathered by NumPy indexing;
on a network mount each page the gather touches is a page fault, taken one
after another in the gathering thread (3 READs in flight at most, measured).
Side B asks the kernel for those pages first, with ``MADV_POPULATE_READ`` on
the deep I/O pool (offsets, then the values they point at), so the faults of a
batch are in flight together and the gather then copies from memory.

Writes a ``save_to_disk``-style folder (Arrow IPC streams + ``state.json``,
65,536 rows of 256-1,792 int32 ids and an int64 label, record batches of 1,000
rows, 2 files, ~256 MiB), mounts it through slowfs with --read-latency-ms,
and reads --batches batches of 32 rows (TableSource's default full shuffle:
rows at random over the whole table) with a Loader, alternating A (no
populate: ``_tables._POPULATE = False``, every release up to this one) and B
(the default), A/B/A/B, each trial on a fresh mount (cold: slowfs drops the
page cache on open). Reports median batches/s, the first batch's wait, the
server's max READs in flight and READs in all, and a SHA-256 of every batch,
which must be the same on both sides.

    PYTHONPATH=src python benchmarks/arrow_slowfs.py --latency-ms 20
    PYTHONPATH=src python benchmarks/arrow_slowfs.py --cached --batches 2000 --rounds 3

Prediction, written before the first run (20 ms): a batch touches ~32 offsets
pages, ~32-64 values pages and ~32 label pages; A faults them in the gathering
thread (readahead gives it ~3 in flight): ~1.5 s per batch, ~0.7 batches/s.
B fills them on the 8 I/O threads in two rounds (offsets and labels, then
values): ~(96 / 8) x 20 ms = 0.25 s per batch, ~3-4 batches/s, 4-5x A, READs in
flight up to 8. On a page-cached file B costs a populate call per range
(~1-2 us each, 64-96 per batch): a few percent (checked with
``headrace bench -w table``).

``--read-ahead 8192 --batches 96``: the windowed shuffle (windows of 8,192 rows,
~32 MiB) with and without the record batches of this window and the next read
ahead into the page cache (``_tables._READ_AHEAD``), both sides filling a
batch's pages first. Prediction, written before the first run (20 ms): A pays
the fill's round trips per chunk, as the full shuffle does (~10 batches/s,
somewhat more as the window's pages warm); B reads a window as pieces of
256 KiB, 64 at a time, ~0.1-0.2 s a window at slowfs's rate, then gathers
from memory: 5-10x A over 96 batches.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
from _slowfs_ab import alternate, fuse_missing, median, mount, one_digest, parser, table

import headrace.formats._tables as tables
from headrace.formats import TableSource
from headrace.pipeline import Loader

ROWS, FILES = 65_536, 2


def write(src: Path) -> None:
    rng = np.random.default_rng(0)
    lens = rng.integers(256, 1792, ROWS)
    offs = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    vals = rng.integers(0, 50_000, int(offs[-1]), dtype=np.int32)
    t = pa.table(
        {
            "ids": pa.ListArray.from_arrays(pa.array(offs), pa.array(vals)),
            "label": pa.array(rng.integers(0, 10, ROWS)),
        }
    )
    names = [f"data-{i:05d}-of-{FILES:05d}.arrow" for i in range(FILES)]
    per = ROWS // FILES
    for i, name in enumerate(names):
        with pa.OSFile(str(src / name), "wb") as f, pa.ipc.new_stream(f, t.schema) as w:
            w.write_table(t.slice(i * per, per), max_chunksize=1000)
    (src / "state.json").write_text(json.dumps({"_data_files": [{"filename": n} for n in names]}))


def read(root: Path, batches: int, window_rows: int = 0) -> tuple[float, float, str]:
    """(batches/s, first batch s, SHA-256 of every batch) of a Loader over ``root``
    (``window_rows``: the windowed shuffle with windows of that many rows)."""
    h = hashlib.sha256()
    t0 = time.perf_counter()
    first = 0.0
    shuffle = {"shuffle": "window", "window_rows": window_rows} if window_rows else {}
    src = TableSource(root, width=1792, **shuffle)  # type: ignore[arg-type]
    with Loader(src, batch_size=32, steps=batches) as ld:
        for i, b in enumerate(ld):
            if i == 0:
                first = time.perf_counter() - t0
            for k in sorted(b):
                h.update(np.ascontiguousarray(b[k]).tobytes())
    return batches / (time.perf_counter() - t0), first, h.hexdigest()


def trial(src: Path, mnt: Path, args: argparse.Namespace, b_side: bool) -> dict[str, float | str]:
    if args.read_ahead:  # A and B: the windowed shuffle, without and with read-ahead
        tables._READ_AHEAD = b_side
    else:  # A and B: no fill, fill (the full shuffle)
        tables._POPULATE = b_side
    if args.cached:  # the local folder, warm in the page cache: what the fill costs
        bps, first, sha = read(src, args.batches, args.read_ahead)
        return {"bps": bps, "first_s": first, "mif": 0, "reads": 0, "sha": sha}
    with mount(src, mnt, args) as m:
        bps, first, sha = read(m.mnt, args.batches, args.read_ahead)
        s = m.stats()
    return {
        "bps": bps,
        "first_s": first,
        "mif": s["max_in_flight"],
        "reads": s["reads"],
        "sha": sha,
    }


def main() -> int:
    ap = parser(__doc__, 24)
    ap.add_argument(
        "--cached",
        action="store_true",
        help="read the local folder, page-cached, instead of a slow mount (try --batches 2000)",
    )
    ap.add_argument(
        "--read-ahead",
        type=int,
        default=0,
        metavar="WINDOW_ROWS",
        help="instead: the windowed shuffle (windows of WINDOW_ROWS rows) without and with "
        "the next window read ahead (try 8192 and --batches 96)",
    )
    args = ap.parse_args()
    if not args.cached and fuse_missing():
        return 0
    sides = (
        {"no read-ahead": False, "read-ahead": True}
        if args.read_ahead
        else {"gather faults": False, "populate": True}
    )
    with tempfile.TemporaryDirectory(prefix="arrow-slowfs-") as tmp:
        src = Path(tmp) / "src"
        src.mkdir()
        write(src)
        res = alternate(sides, args.rounds, lambda b: trial(src, Path(tmp) / "mnt", args, b))
    digest = one_digest(res)
    if digest is None:
        return 1
    where = "page cache" if args.cached else f"{args.latency_ms:g} ms"
    table(
        ["READ latency", "side", "batches/s", "first batch", "max READs in flight", "READs"],
        (
            [where, name, f"{median(xs, 'bps'):.2f}", f"{median(xs, 'first_s'):.2f} s",
             max(int(x["mif"]) for x in xs), int(median(xs, "reads"))]
            for name, xs in res.items()
        ),
    )  # fmt: skip
    print(f"digest (both sides): {digest[:16]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
