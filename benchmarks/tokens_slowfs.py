"""Token windows on a slow mount: the first batch waits for whole blocks, or for its samples.

Writes a uint32 token file (--file-mib, 256 MiB by default: one default window
of 64 blocks of 4 MiB), mounts it through slowfs with --read-latency-ms, and
reads --batches batches of 32 samples of context 1024 with a Loader over a
TokenSource (reads="populate", the default), alternating
A (whole blocks: a batch waits until every 4 MiB block its samples touch is
filled, ``_SAMPLE_FIRST = False``, how every release up to this one read) and
B (sample first: a batch waits only for its samples' pages, filled at once on
the deep I/O pool, while the rest of each touched block is filled behind on the
I/O pool), A/B/A/B, each trial on a fresh mount (cold: slowfs drops the page
cache on open). Reports medians of the time to the first batch and to the
last, the steady rate (batches after the first, per second), the server's max READs in flight,
the bytes the server had read when the first batch was handed over (the first
stats snapshot after it, so an upper bound for B), and a SHA-256 of every
batch, which must be the same on both sides.

    PYTHONPATH=src python benchmarks/tokens_slowfs.py --latency-ms 20
    PYTHONPATH=src python benchmarks/tokens_slowfs.py --local   # no mount: the CPU cost

Prediction, written before the first measurement (256 MiB file, 8 I/O
threads, 64 deep threads, max_background 64). A batch of 32 random samples
touches about 25 of the 64 blocks (64 x (1 - (63/64)^32)); a populated block is
about 32 READs of 128 KiB one after another, so A's first batch waits
ceil(25 / 8) = 4 rounds of 32 round trips: about 2.6 s at 20 ms and 0.7 s at
5 ms. B's first batch waits for 32 page ranges of 4,100 bytes, each one
read-around READ, all in flight at once: one or two round trips, 0.03-0.08 s at
20 ms and 0.01-0.03 s at 5 ms (30-50x less). Steady: A waits for the rest of
the window's blocks over its next batches (the whole window is about
64 x 32 x 20 ms / 8 = 5 s at 20 ms), so about 15-20 batches/s over 48 batches
at 20 ms; B keeps going at one or two round trips per chunk while the blocks
fill behind, 40-80 batches/s at 20 ms. Bytes read by the end of each trial
equal (the whole window, about 256 MiB, within 5%): the samples' pages are
pages the blocks read anyway. B's bytes at its first batch: 32 x 128 KiB plus
whatever blocks got through by then, well under A's 25 x 4 MiB.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

import headrace.formats._token_window as token_window
from headrace.emulate import SlowMount, fuse_available
from headrace.formats import TokenSource
from headrace.pipeline import Loader

SIDES = {"A whole blocks": False, "B sample first": True}


def say(msg: str) -> None:
    sys.stderr.write(msg + "\n")


class Watcher:
    """Polls the server's stats file, so the bytes read at a moment can be looked up."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.snaps: list[tuple[float, int]] = []  # (written_at, bytes_read)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.01):
            try:
                s = json.loads(self.path.read_text())
            except (OSError, ValueError):
                continue
            if not self.snaps or s["written_at"] != self.snaps[-1][0]:
                self.snaps.append((float(s["written_at"]), int(s["bytes_read"])))

    def bytes_after(self, t: float) -> int:
        """Bytes in the first snapshot written after wall time ``t``."""
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            for at, n in list(self.snaps):
                if at >= t:
                    return n
            time.sleep(0.01)
        return -1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def read_all(path: Path, args: argparse.Namespace) -> tuple[float, float, float, str]:
    """(first batch s, last batch s, close s, SHA-256 of every batch) of one Loader."""
    h = hashlib.sha256()
    first = 0.0
    t0 = time.perf_counter()
    source = TokenSource(path, dtype="uint32", context=args.context)
    with Loader(source, batch_size=args.batch, steps=args.batches, seed=args.seed) as ld:
        for i, b in enumerate(ld):
            if i == 0:
                first = time.perf_counter() - t0
            h.update(np.ascontiguousarray(b["x"]).tobytes())
            h.update(np.ascontiguousarray(b["y"]).tobytes())
        last = time.perf_counter() - t0
    return first, last, time.perf_counter() - t0 - last, h.hexdigest()


def local_trial(src: Path, args: argparse.Namespace, sample_first: bool) -> dict[str, Any]:
    """The same on the local file (page cached after the first trial): the CPU cost."""
    token_window._SAMPLE_FIRST = sample_first
    first, last, closed, sha = read_all(src / "tokens.bin", args)
    return {
        "first_s": first,
        "last_s": last,
        "steady_bps": (args.batches - 1) / (last - first),
        "close_s": closed,
        "mif": 0,
        "first_mib": 0.0,
        "total_mib": 0.0,
        "reads": 0,
        "sha": sha,
    }


def trial(src: Path, mnt: Path, args: argparse.Namespace, sample_first: bool) -> dict[str, Any]:
    token_window._SAMPLE_FIRST = sample_first
    with SlowMount(
        src,
        mnt,
        read_latency_ms=args.latency_ms,
        open_latency_ms=args.open_latency_ms,
        stats_interval_s=0.02,
    ) as m:
        watch = Watcher(m.stats_file)
        wall0 = time.time()
        first, last, closed, sha = read_all(m.mnt / "tokens.bin", args)
        at_first = watch.bytes_after(wall0 + first)
        watch.stop()
        s = m.stats()
    return {
        "first_s": first,
        "last_s": last,
        "steady_bps": (args.batches - 1) / (last - first),
        "close_s": closed,  # the loader's close: waits for the block fills already started
        "mif": int(s["max_in_flight"]),
        "first_mib": at_first / 2**20,
        "total_mib": int(s["bytes_read"]) / 2**20,
        "reads": int(s["reads"]),
        "sha": sha,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--latency-ms", type=float, default=20.0)
    ap.add_argument("--open-latency-ms", type=float, default=0.0)
    ap.add_argument("--file-mib", type=int, default=256)
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--batches", type=int, default=48)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=2, help="A/B pairs")
    ap.add_argument("--local", action="store_true", help="read the local file, no mount")
    args = ap.parse_args()
    ok, why = fuse_available()
    if not ok and not args.local:
        say(f"skip: FUSE unavailable: {why}")
        return 0
    res: dict[str, list[dict[str, Any]]] = {k: [] for k in SIDES}
    with tempfile.TemporaryDirectory(prefix="tokens-slowfs-") as tmp:
        src = Path(tmp) / "src"
        src.mkdir()
        n = (args.file_mib << 20) // 4
        rng = np.random.default_rng(0)
        rng.integers(0, 2**31 - 1, n, dtype=np.uint32).tofile(src / "tokens.bin")
        for r in range(args.rounds):
            for name, flag in SIDES.items():
                out = (
                    local_trial(src, args, flag)
                    if args.local
                    else trial(src, Path(tmp) / "mnt", args, flag)
                )
                res[name].append(out)
                say(
                    f"round {r} {name}: first {out['first_s']:.3f} s, last "
                    f"{out['last_s']:.3f} s, steady "
                    f"{out['steady_bps']:.1f} batches/s, close {out['close_s']:.2f} s, "
                    f"mif {out['mif']}, {out['first_mib']:.1f} MiB at first batch, "
                    f"{out['total_mib']:.1f} MiB / {out['reads']} READs in all, "
                    f"sha256 {out['sha'][:16]}"
                )
    digests = {x["sha"] for xs in res.values() for x in xs}
    if len(digests) != 1:
        say(f"FAIL: the sides read different batches: {sorted(digests)}")
        return 1

    def med(xs: list[dict[str, Any]], k: str) -> float:
        return float(statistics.median(float(x[k]) for x in xs))

    for name, xs in res.items():
        where = "local" if args.local else f"{args.latency_ms:g} ms"
        print(
            f"| {args.file_mib} MiB | {where} | {name} | {med(xs, 'first_s'):.3f} s "
            f"| {med(xs, 'last_s'):.3f} s "
            f"| {med(xs, 'steady_bps'):.1f} | {max(x['mif'] for x in xs)} "
            f"| {med(xs, 'first_mib'):.1f} | {med(xs, 'total_mib'):.1f} "
            f"| {med(xs, 'close_s'):.2f} s |"
        )
    print(f"digest (both sides): {digests.pop()[:16]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
