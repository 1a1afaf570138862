"""Document positions of a Megatron index on remote storage: the starts held as an
array against blocks fetched where a window's rows look them up.

    PYTHONPATH=src python benchmarks/megatron_starts_http.py --src BEFORE --src . [--rounds 2]

A pair of 8M documents of 4 to 12 tokens (64M uint16 tokens: a 128 MB ``.bin``, a
160 MB ``.idx``) is served by a plain HTTP server with ranges (each GET reads only its
range: moto reads the whole object for each ranged GET, 0.25 s for this index) behind a
``LatencyProxy`` of 20 ms. Each trial is a fresh process (sides alternating,
``--src`` trees), a ``TokenSource(positions="documents", window_bytes=4 MiB)``: windows
of 2M tokens, 1/32 of the file. A ``Loader`` (B=8, L=1024, ``prefetch=0``) reads 256
steps at step 0 and 256 near sample 10**9 (as a resume); reported: the first step's
ms (which reads the index's starts or samples), the mean of the steps after it, the
RSS the starts left held (anonymous, not the page cache's) and the peak, the GETs,
and the SHA-256 of every batch (``position_ids`` included).

Prediction (written before measuring): held 64 MB (the array: 8 bytes a document)
against ~20 MB (samples 2 MB, and 16 blocks of 512 KiB kept for each array); peak
down by the pointers and entries the array is made from (~130 MB); the first step
about the same (both read the pointers and entries through once); steps the same
after each window's blocks are fetched, a round or two of GETs at each window's
first batches (~2,000 batches a window in a real run, ~256 here).

Measured (2 rounds, 2c, 2026-12-04; before: the tree without blocks): sha256
969c01ac9597 on both sides. Held (anonymous) 145.6-173.1 -> 107.3-112.9 MB: the array's
64 MB less the blocks kept; peak 378-405 -> 386-388 MB (the prediction's drop did not
come: the windows and the token reads peak higher than the array's making); first
step 1.26-1.33 -> 0.45-0.48 s (no 64 MB array made from 128 MB of entries); steps
0.17-0.21 -> 0.67-1.02 ms (83 GETs against 43 over the 512 steps: the blocks each
window's first batches fetch, a 20 ms round each, here over 256 steps a window; with
``prefetch`` on, the read-ahead thread waits for them, not the training step).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
FAR = 10**9


def rss_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def build(d: Path) -> None:
    import numpy as np

    from headrace.formats import write_megatron_index

    if (d / "m.idx").exists():
        return
    d.mkdir(parents=True, exist_ok=True)
    lengths = (np.arange(8_000_000) * 7919 % 9 + 4).astype(np.int32)
    tokens = np.random.default_rng(0).integers(0, 50_000, int(lengths.sum()), np.uint16)
    tokens.tofile(d / "m.bin")
    write_megatron_index(d / "m.idx", np.uint16, lengths)


class _Ranges(BaseHTTPRequestHandler):
    """A folder's files: HEAD, GET and GET with one byte range (read by ``pread``)."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # else a kept connection's answers wait ~40 ms for an ACK
    root = Path()

    def _answer(self, body: bool) -> None:
        path = self.root / self.path.lstrip("/")
        size = path.stat().st_size
        first, last, status = 0, size - 1, 200
        m = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range") or "")
        if m:
            first, last, status = int(m.group(1)), min(int(m.group(2) or size - 1), size - 1), 206
        self.send_response(status)
        self.send_header("ETag", f'"{int(path.stat().st_mtime_ns)}-{size}"')
        if m:
            self.send_header("Content-Range", f"bytes {first}-{last}/{size}")
        self.send_header("Content-Length", str(last + 1 - first))
        self.end_headers()
        if body:
            fd = os.open(path, os.O_RDONLY)
            try:
                self.wfile.write(os.pread(fd, last + 1 - first, first))
            finally:
                os.close(fd)

    def do_GET(self) -> None:
        self._answer(True)

    def do_HEAD(self) -> None:
        self._answer(False)

    def log_message(self, *args: object) -> None:
        pass


def child(url: str) -> dict[str, Any]:
    from headrace.formats import TokenSource
    from headrace.pipeline import Loader
    from headrace.testing import batch_digest

    before, anon = rss_mb("VmRSS"), rss_mb("RssAnon")
    src = TokenSource(url, context=1024, positions="documents", window_bytes=4 << 20)
    got: dict[str, Any] = {}
    digests = []
    with Loader(src, batch_size=8, seed=7, prefetch=0) as ld:
        state = ld.state_dict()
        for at in (0, FAR // 8):
            ld.load_state_dict({**state, "step": at})
            it = iter(ld)
            t0 = time.perf_counter()
            first = next(it)
            got[f"first_ms@{at and 'far'}"] = round((time.perf_counter() - t0) * 1e3, 1)
            t0 = time.perf_counter()
            batches = [first] + [next(it) for _ in range(256)]
            got[f"step_us@{at and 'far'}"] = round((time.perf_counter() - t0) / 256 * 1e6)
            digests.append(batch_digest(batches))
    got["held_mb"] = round(rss_mb("VmRSS") - before, 1)
    got["held_anon_mb"] = round(rss_mb("RssAnon") - anon, 1)
    got["peak_mb"] = round(rss_mb("VmHWM"), 1)
    stats = src.object_stats
    got["gets"] = stats.requests if stats is not None else 0
    got["sha256"] = hashlib.sha256("".join(digests).encode()).hexdigest()[:12]
    src.close()
    return got


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", action="append", default=[], help="a source tree (repeat)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--root", type=Path, default=Path("/tmp/headrace-megatron-starts"))
    ap.add_argument("--child", nargs=2, metavar=("SIDE", "URL"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        sys.path.insert(0, str(Path(a.child[0]) / "src"))
        print(json.dumps(child(a.child[1])))
        return 0
    sys.path.insert(0, str(HERE.parent / "src"))
    sys.path.insert(0, str(HERE))
    from _children import alternate
    from _out import out

    from headrace.emulate import LatencyProxy

    build(a.root)
    handler = type("Handler", (_Ranges,), {"root": a.root})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with LatencyProxy(f"http://127.0.0.1:{server.server_address[1]}", latency_ms=20) as p:
            got = alternate(__file__, a.src, a.rounds, [f"{p.endpoint}/m.bin"])
    finally:
        server.shutdown()
    keys = [k for k in next(iter(got.values()))[0] if k != "sha256"]
    out(f"medians of {a.rounds} round(s)")
    out("| side | " + " | ".join(keys) + " | sha256 |")
    out("|---|" + "---:|" * len(keys) + "---|")
    for side, trials in got.items():
        med = {k: sorted(t[k] for t in trials)[len(trials) // 2] for k in keys}
        shas = "/".join(sorted({t["sha256"] for t in trials}))
        name = os.path.basename(os.path.abspath(side))
        out(f"| {name} | " + " | ".join(str(med[k]) for k in keys) + f" | {shas} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
