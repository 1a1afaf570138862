"""Serial vs threaded random 4 KiB preads through slowfs: does concurrency hide latency?

Mounts a random file through slowfs with --read-latency-ms, then alternates
A (serial preads) and B (preads on N threads through headrace's shared I/O
pool) over the same page offsets, A/B/A/B..., each side on a fresh open (slowfs
drops the page cache on open, so both start cold). Reports the median per-read
time of each side, their ratio, the server's max READs in flight, and the
SHA-256 of the bytes each side read, which must equal the source's.

    PYTHONPATH=src python benchmarks/slowfs_smoke.py --latency-ms 10 --threads 32
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from headrace.emulate import SlowMount, fuse_available
from headrace.io import LocalFile, io_pool, set_io_threads

PAGE = 4096


def say(msg: str, *, err: bool = True) -> None:
    # Progress on stderr, the table row on stdout, so `> table.md` keeps only results.
    (sys.stderr if err else sys.stdout).write(msg + "\n")


def serial(path: Path, pages: list[int]) -> tuple[float, bytes]:
    f = LocalFile(path)
    try:
        t0 = time.perf_counter()
        chunks = [f.pread(p * PAGE, PAGE).tobytes() for p in pages]
        return time.perf_counter() - t0, b"".join(chunks)
    finally:
        f.close()


def threaded(path: Path, pages: list[int]) -> tuple[float, bytes]:
    f = LocalFile(path)
    try:
        t0 = time.perf_counter()
        chunks = [c.tobytes() for c in io_pool().map(lambda p: f.pread(p * PAGE, PAGE), pages)]
        return time.perf_counter() - t0, b"".join(chunks)
    finally:
        f.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--latency-ms", type=float, default=10.0)
    ap.add_argument("--threads", type=int, default=32)
    ap.add_argument("--reads", type=int, default=256, help="preads per side per round")
    ap.add_argument("--rounds", type=int, default=3, help="A/B pairs")
    ap.add_argument("--file-mib", type=int, default=64)
    ap.add_argument("--max-background", type=int, default=64)
    ap.add_argument("--json", type=Path, default=None, help="also write results here")
    args = ap.parse_args()

    ok, why = fuse_available()
    if not ok:
        say(f"skip: FUSE unavailable: {why}")
        return 0
    set_io_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="slowfs-smoke-") as tmp:
        src = Path(tmp) / "src"
        src.mkdir()
        blob = random.Random(0).randbytes(args.file_mib << 20)
        (src / "data.bin").write_bytes(blob)
        n_pages = len(blob) // PAGE
        with SlowMount(
            src,
            Path(tmp) / "mnt",
            read_latency_ms=args.latency_ms,
            max_background=args.max_background,
            max_threads=max(64, args.threads),
            stats_interval_s=0.05,
        ) as m:
            path = m.mnt / "data.bin"
            times: dict[str, list[float]] = {"serial": [], "threaded": []}
            max_in_flight = {"serial": 0, "threaded": 0}
            for r in range(args.rounds):
                # Distinct pages, so no read is served from a page another one cached.
                pages = random.Random(r + 1).sample(range(n_pages), args.reads)
                want = hashlib.sha256(b"".join(blob[p * PAGE : (p + 1) * PAGE] for p in pages))
                for name, fn in (("serial", serial), ("threaded", threaded)):
                    before = m.stats()["reads"]
                    elapsed, got = fn(path, pages)
                    digest = hashlib.sha256(got).hexdigest()
                    if digest != want.hexdigest():
                        say(f"FAIL: {name} round {r} read other bytes: {digest}")
                        return 1
                    s = m.stats()
                    max_in_flight[name] = max(max_in_flight[name], s["max_in_flight"])
                    times[name].append(elapsed / args.reads)
                    say(
                        f"round {r} {name:8s} {elapsed / args.reads * 1e3:7.3f} ms/read "
                        f"({s['reads'] - before} READs) sha256 {digest[:16]}"
                    )
    med = {k: statistics.median(v) for k, v in times.items()}
    ratio = med["serial"] / med["threaded"]
    result = {
        "latency_ms": args.latency_ms,
        "threads": args.threads,
        "max_background": args.max_background,
        "reads_per_side": args.reads,
        "rounds": args.rounds,
        "serial_ms_per_read": round(med["serial"] * 1e3, 3),
        "threaded_ms_per_read": round(med["threaded"] * 1e3, 3),
        "speedup": round(ratio, 1),
        "max_in_flight_threaded": max_in_flight["threaded"],
        "digests_match": True,
    }
    say(
        f"| {args.latency_ms:g} ms | {args.max_background} | "
        f"{result['serial_ms_per_read']} ms | {args.threads} threads: "
        f"{result['threaded_ms_per_read']} ms | {result['speedup']}x | "
        f"{result['max_in_flight_threaded']} |",
        err=False,
    )
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
