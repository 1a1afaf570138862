"""Mapped reads of cold local files: the bytes brought in, A/B.

Run: PYTHONPATH=src python benchmarks/mapped_readahead.py [DIR]
Writes (once, under DIR, default /tmp/headrace-mapped-readahead) a 37 MB row
file (9,000 rows of 4,100 bytes) and a 96 MiB uint16 token file, then
alternates A (``ADVISE = False``: the kernel's read-around at every fault, 8 MiB
with read_ahead_kb 8192 here) and B (maps advised MADV_RANDOM; runs of 64 KiB or
more asked for with MADV_WILLNEED first) over ROUNDS trials each. Every trial
evicts the file's pages first (POSIX_FADV_DONTNEED) and reports the bytes read
from storage (/proc/self/io read_bytes), the seconds and the output's digest:

* random: RangeReader("mmap"), 8 batches of 32 random rows;
* sequential: RangeReader("mmap"), 64 batches of 32 consecutive rows (8.4 MB);
* window: RangeReader("mmap"), one 16 MiB range (a windowed shuffle's read);
* tokens: TokenSource (mapped windows, blocks populated), 2 batches of 32.

Prediction (written before measuring): random A ~37 MB (the file), B ~2.6 MB
and no slower; sequential and window the same bytes within the read-around's
tail (A up to 8 MiB more), B's seconds within 1.5x of A's; tokens the same
bytes (whole 4 MiB blocks either way), seconds within 1.5x.
"""

from __future__ import annotations

import hashlib
import os
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np
from _out import out

import headrace.io._buffers as buffers
from _cold import evict, read_bytes
from headrace.formats import TokenSource
from headrace.io import RangeReader
from headrace.pipeline import Loader

ROW, ROWS = 4100, 9000
TOKENS = 48 << 20
ROUNDS = 4


def rows(path: str, batches: list[np.ndarray]) -> str:
    h = hashlib.sha256()
    with RangeReader("mmap") as r:
        for b in batches:
            h.update(r.read_rows(path, b, ROW).tobytes())
    return h.hexdigest()[:12]


def window(path: str) -> str:
    with RangeReader("mmap") as r:
        (got,) = r.read(path, [(ROW, 16 << 20)])
    return hashlib.sha256(got.tobytes()).hexdigest()[:12]


def tokens(path: str) -> str:
    h = hashlib.sha256()
    src = TokenSource(path, context=1024, dtype=np.uint16, read_ahead=False)
    with Loader(src, batch_size=32, seed=0) as loader:
        it = iter(loader)
        for _ in range(2):
            h.update(np.ascontiguousarray(next(it)["x"]).tobytes())
    src.close()
    return h.hexdigest()[:12]


def main() -> None:
    root = sys.argv[1] if len(sys.argv) > 1 else "/tmp/headrace-mapped-readahead"
    os.makedirs(root, exist_ok=True)
    rows_path, tok_path = os.path.join(root, "rows.bin"), os.path.join(root, "tokens.bin")
    rng = np.random.default_rng(0)
    if not os.path.exists(rows_path):
        rng.integers(0, 256, ROW * ROWS, np.uint8).tofile(rows_path + ".tmp")
        os.replace(rows_path + ".tmp", rows_path)
    if not os.path.exists(tok_path):
        rng.integers(0, 50_000, TOKENS, np.uint16).tofile(tok_path + ".tmp")
        os.replace(tok_path + ".tmp", tok_path)
    pick = np.random.default_rng(1)
    random = [pick.choice(ROWS, 32, replace=False) for _ in range(8)]
    seq = [np.arange(k * 32, (k + 1) * 32) for k in range(64)]
    cases: dict[str, tuple[str, Callable[[], str]]] = {
        "random": (rows_path, lambda: rows(rows_path, random)),
        "sequential": (rows_path, lambda: rows(rows_path, seq)),
        "window": (rows_path, lambda: window(rows_path)),
        "tokens": (tok_path, lambda: tokens(tok_path)),
    }
    tokens(tok_path)  # pools started and modules imported before the first trial
    got: dict[tuple[str, str], list[tuple[float, float, str]]] = {}
    for r in range(ROUNDS):
        for name, (path, run) in cases.items():
            for side in "AB":
                buffers.ADVISE = side == "B"
                evict(path)
                r0, t0 = read_bytes(), time.perf_counter()
                digest = run()
                t = time.perf_counter() - t0
                mb = (read_bytes() - r0) / 1e6
                got.setdefault((name, side), []).append((mb, t, digest))
                out(r, name, side, f"{mb:.2f} MB", f"{t * 1e3:.1f} ms", digest)
    buffers.ADVISE = True
    for name in cases:
        a, b = got[name, "A"], got[name, "B"]
        digests = {d for _, _, d in a + b}
        if len(digests) != 1:
            raise SystemExit(f"{name}: digests differ: {digests}")
        mb_a, mb_b = (statistics.median(x[0] for x in s) for s in (a, b))
        s_a, s_b = (statistics.median(x[1] for x in s) for s in (a, b))
        out(
            f"{name}: read A {mb_a:.2f} MB  B {mb_b:.2f} MB;  "
            f"time A {s_a * 1e3:.1f} ms  B {s_b * 1e3:.1f} ms  B/A {s_b / s_a:.2f};  "
            f"digest {digests.pop()}"
        )


if __name__ == "__main__":
    main()
