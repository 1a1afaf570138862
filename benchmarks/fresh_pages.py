"""Reading a page-cached file into fresh pages vs into a recycled buffer.

The figure behind ``reads="pread"``'s recycled, huge-page backed window buffers
(docs/tokens.md "How bytes are read", ``headrace.io._buffers``): a positional read
into memory never touched before pays a page fault per 4 KiB page on top of the
copy. Four sides alternate in every trial, each reading the whole file in 4 MiB
``os.preadv`` calls: into a fresh buffer of 4 KiB pages, into a fresh buffer that
asks for transparent huge pages, and into one buffer allocated and filled once, of
huge pages ("recycled", as the token windows' are) or of 4 KiB pages.
Medians of the trials; every side's SHA-256 over the bytes it read must agree.

    PYTHONPATH=src python benchmarks/fresh_pages.py [--mib 256] [--trials 7]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from _out import out

from headrace.io._buffers import page_aligned_empty

BLOCK = 4 << 20


def read_into(fd: int, buf: np.ndarray) -> float:
    """Seconds to read the file at ``fd`` into ``buf``, 4 MiB a call."""
    t = time.perf_counter()
    for off in range(0, buf.size, BLOCK):
        view = memoryview(buf[off : off + BLOCK])
        if os.preadv(fd, [view], off) != len(view):
            raise OSError(f"short read at {off}")
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=256, help="file size (MiB)")
    ap.add_argument("--trials", type=int, default=7)
    ap.add_argument("--dir", default=tempfile.gettempdir(), help="where the file is written")
    args = ap.parse_args()
    size = args.mib << 20
    path = Path(args.dir) / f"headrace-fresh-pages-{args.mib}.bin"
    if not path.exists() or path.stat().st_size != size:
        np.random.default_rng(0).integers(0, 256, size, dtype=np.uint8).tofile(path)
    recycled = page_aligned_empty(size, huge=True)
    recycled_small = page_aligned_empty(size, huge=False)
    sides: dict[str, Callable[[], np.ndarray]] = {
        "fresh 4 KiB pages": lambda: page_aligned_empty(size, huge=False),
        "fresh huge pages": lambda: page_aligned_empty(size, huge=True),
        "recycled": lambda: recycled,
        "recycled 4 KiB": lambda: recycled_small,
    }
    fd = os.open(path, os.O_RDONLY)
    try:
        read_into(fd, recycled)  # the page cache warm, the recycled buffers faulted in
        read_into(fd, recycled_small)
        secs: dict[str, list[float]] = {name: [] for name in sides}
        digests: dict[str, set[str]] = {name: set() for name in sides}
        for _ in range(args.trials):
            for name, make in sides.items():  # A B C D A B C D ...
                buf = make()
                secs[name].append(read_into(fd, buf))
                digests[name].add(hashlib.sha256(buf).hexdigest()[:16])
                del buf
    finally:
        os.close(fd)
    out(f"{args.mib} MiB page-cached file, 4 MiB preadv calls, {args.trials} trials (A/B/C/D)")
    base = statistics.median(secs["recycled"])
    for name in sides:
        med = statistics.median(secs[name])
        out(
            f"{name:18s} {size / med / 1e9:6.2f} GB/s (median; {size / max(secs[name]) / 1e9:.2f}"
            f"-{size / min(secs[name]) / 1e9:.2f})  {med / base:5.2f}x the recycled time"
            f"  sha256 {', '.join(sorted(digests[name]))}"
        )
    if len(set().union(*digests.values())) != 1:
        raise SystemExit("the sides read different bytes")


if __name__ == "__main__":
    main()
