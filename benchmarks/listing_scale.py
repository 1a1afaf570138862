"""What a FileSource's listing costs at ImageNet scale: held as lists of Python objects
(``old``: ``list[str]`` keys, ``list[int]`` sizes, ``list[str]`` versions, as a
``FileList`` held them until 2026-12-04) or packed (``new``: ``PackedNames``, an
``int64`` array, ``PackedTags``), side by side.

    PYTHONPATH=src python benchmarks/listing_scale.py [--sizes 100000,1000000] [--rounds 5]

Each trial is a fresh process (sides alternating A/B/B/A round by round), for ``n``
keys named as ImageNet's (``train/n01440764/n01440764_10026.JPEG``: 1,000 folders),
sizes of ~110 KB and local version tags (``device:inode:mtime_ns``). It reports:

- ``held_mb``: what the listing holds (``tracemalloc``, which counts NumPy's buffers);
- ``pickle_mb``: the bytes a worker copy of a source is sent for it (the default
  protocol, as ``multiprocessing`` pickles), and ``pickle_s`` / ``unpickle_s``;
- ``fork_mb``: the private memory each of 2 forked workers gains by reading every
  key, size and version once (``Private_Dirty`` of ``/proc/self/smaps_rollup``, before
  and after: reading a ``str`` writes its reference count, so a worker copies every
  page of the listing it reads, "copy-on-read"), the larger of the two;
- ``sha256``: of every key, size and version read, which both sides must agree on.

Medians over the rounds, each side's, and the new/old ratio of the medians.

2c, 2026-12-04, 5 rounds, old -> new (new/old): 100,000 keys held 22.2 -> 8.4 MB
(0.38), pickled 7.88 -> 8.39 MB (1.07), pickle 28 -> 4.8 ms, unpickle 14 -> 0.7 ms,
a forked worker's growth 21.7 -> 0.2 MB (sha256 c3f5fa4e2474fe7a both); 1,000,000
keys held 224 -> 89 MB (0.40), pickled 79.8 -> 84.9 MB (1.06), pickle 476 -> 58 ms,
unpickle 196 -> 11 ms, a forked worker's growth 214.7 -> 0.2 MB (de220b3c07f5656e).
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import pickle
import statistics
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

from _children import alternate
from _out import out

HERE = Path(__file__).resolve()
FIGURES = ("held_mb", "pickle_mb", "pickle_s", "unpickle_s", "fork_mb")


def listing(n: int) -> tuple[list[str], list[int], list[str]]:
    """``n`` ImageNet-like keys (sorted), sizes and local version tags."""
    keys = [f"train/n{1440764 + i % 1000:08d}/n{1440764 + i % 1000:08d}_{i}.JPEG" for i in range(n)]
    keys.sort()
    sizes = [60_000 + (i * 7919) % 100_000 for i in range(n)]
    tags = [f"2049:{9_000_000 + i}:{1733300000_000000000 + i * 977}" for i in range(n)]
    return keys, sizes, tags


def build(side: str, n: int) -> Any:
    from headrace.formats._file_list import packed  # (imported before tracing: both sides)

    keys, sizes, tags = listing(n)
    return (keys, sizes, tags) if side == "old" else packed((keys, sizes, tags))


def read_all(held: Any) -> str:
    """Every key, size and version, by index, as a fetch reads them; their digest."""
    keys, sizes, tags = held
    h = hashlib.sha256()
    for i in range(len(keys)):
        h.update(f"{keys[i]}\0{int(sizes[i])}\0{tags[i]}\n".encode())
    return h.hexdigest()[:16]


def private_dirty_kb() -> int:
    for line in Path("/proc/self/smaps_rollup").read_text().splitlines():
        if line.startswith("Private_Dirty:"):
            return int(line.split()[1])
    raise RuntimeError("no Private_Dirty in /proc/self/smaps_rollup")


def forked_growth(held: Any, workers: int = 2) -> float:
    """The most private memory (MB) a forked worker gains reading the whole listing."""
    pipes = []
    for _ in range(workers):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the worker: nothing but the read, then out without cleanup
            os.close(r)
            before = private_dirty_kb()
            read_all(held)
            os.write(w, str(private_dirty_kb() - before).encode())
            os._exit(0)
        os.close(w)
        pipes.append((pid, r))
    grown = []
    for pid, r in pipes:
        with os.fdopen(r) as f:
            grown.append(int(f.read()))
        os.waitpid(pid, 0)
    return max(grown) / 1024


def trial(side: str, n: int) -> dict[str, Any]:
    import headrace.formats._file_list  # noqa: F401  (its import is not the listing's)

    gc.collect()
    tracemalloc.start()
    held = build(side, n)
    gc.collect()
    held_b = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    got: dict[str, Any] = {"side": side, "n": n, "held_mb": round(held_b / 1e6, 2)}
    dumps, loads = [], []
    for _ in range(3):
        t0 = time.perf_counter()
        blob = pickle.dumps(held)
        t1 = time.perf_counter()
        back = pickle.loads(blob)
        t2 = time.perf_counter()
        dumps.append(t1 - t0)
        loads.append(t2 - t1)
        del back
    got["pickle_mb"] = round(len(blob) / 1e6, 2)
    got["pickle_s"] = round(statistics.median(dumps), 4)
    got["unpickle_s"] = round(statistics.median(loads), 4)
    got["sha256"] = read_all(pickle.loads(blob))
    del blob
    got["fork_mb"] = round(forked_growth(held), 1)
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100000,1000000")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.child is not None:
        print(json.dumps(trial(args.child, sizes[0])))
        return
    for n in sizes:
        got: dict[str, list[dict[str, Any]]] = {"old": [], "new": []}
        for r in range(args.rounds):  # A/B, then B/A: neither side always first
            order = ["old", "new"] if r % 2 == 0 else ["new", "old"]
            for side, trials in alternate(str(HERE), order, 1, ["--sizes", str(n)]).items():
                got[side] += trials
        digests = {s: sorted({t["sha256"] for t in got[s]}) for s in got}
        out(f"{n:,} keys, {args.rounds} rounds, medians (old | new | new/old):")
        for fig in FIGURES:
            a, b = (statistics.median(t[fig] for t in got[s]) for s in ("old", "new"))
            out(f"  {fig:11s} {a:10.4g} | {b:10.4g} | {b / a if a else float('nan'):.3f}")
        out(f"  sha256      {digests['old']} | {digests['new']}")
        if digests["old"] != digests["new"] or len(digests["old"]) != 1:
            sys.exit("the sides read different listings")


if __name__ == "__main__":
    main()
