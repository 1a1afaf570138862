"""A listing with Python's garbage collector paused (``headrace.io._gc_pause``) against
the same listing with it running, side by side in one process.

    PYTHONPATH=src python benchmarks/listing_gc.py [--keys 100000] [--rounds 8]
        [--root DIR]

``--keys`` files ``train/%012d.jpg`` (a few bytes each, COCO-like ids) are written once
under ``--root`` and listed three ways: a ``FileSource``'s open of ``s3://b/train``
(served by ``benchmarks/_files_s3.py``, no latency: the client's CPU is what is timed)
and of the local folder, which pause the collector, and ``ObjectStore.list_info()`` of
the prefix turned into a list of tuples, which does not (both sides alike, a control).
``running`` is the same code with the pause made a no-op. Sides alternate each round
(A/B, then B/A); reported: the median wall time of each, the time the collector ran
(``gc.callbacks``), and the sha256 of the keys, sizes and tags each side listed.

Prediction (written before measuring): the collector's time is what goes. It had
taken 0.15 s of a 0.90 s ``list_info`` and 0.31-0.36 s of a 1.06-1.18 s ``FileSource``
open of 100,000 keys on S3: ~15% and ~25-30% less. The local open: unknown, the same
kind of objects, so ~20%.

Measured (2c, 2026-12-06): ``FileSource`` on S3, 100,000 keys, 16 rounds: 1.000 s running,
0.873 s paused (1.14x), the collector's time 0.221 -> 0.007 s; 400,000 keys, 4 rounds: 4.16
and 3.61 s (1.15x), 1.08 -> 0.03 s. Half the prediction: the collector had run partly while
the client waited for the server, on the same two cores. The local open: 0.97x (0.008 s of
collection). The control (``list_info``, the same code both sides): 1.08x and 1.03x, this
machine's noise. docs/files.md has the rest.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import hashlib
import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _files_s3 import files_s3, store_options
from _out import out


def write(root: Path, keys: int) -> Path:
    folder = root / f"flat-{keys}" / "train"
    done = folder.parent / ".done"
    if not done.exists():
        folder.mkdir(parents=True, exist_ok=True)
        for i in random.Random(0).sample(range(582_000), keys):
            (folder / f"{i:012d}.jpg").write_bytes(b"x" * (i % 7 + 1))
        done.touch()
    return folder


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--root", default="/tmp/headrace-listing-gc")
    args = ap.parse_args()

    from headrace.formats import FileSource, _file_source
    from headrace.io import ObjectStore
    from headrace.io._gc_pause import gc_paused

    folder = write(Path(args.root), args.keys)

    def side(name: str) -> None:
        pause = gc_paused if name == "paused" else contextlib.nullcontext
        _file_source.gc_paused = pause  # type: ignore[attr-defined]

    collecting = [0.0, 0.0]

    def timed(phase: str, _info: dict[str, Any]) -> None:
        if phase == "start":
            collecting[1] = time.perf_counter()
        else:
            collecting[0] += time.perf_counter() - collecting[1]

    gc.callbacks.append(timed)
    with files_s3(str(folder.parent)) as endpoint:
        options = store_options(endpoint)
        store = ObjectStore("s3://b/train", **options)  # type: ignore[arg-type]

        def listed() -> list[tuple[str, int, str | None]]:
            return [(k, i.size, i.etag) for k, i in store.list_info()]

        def opened(where: str) -> Callable[[], list[tuple[str, int, str | None]]]:
            def run() -> list[tuple[str, int, str | None]]:
                kw: dict[str, Any] = {"store_options": options} if "://" in where else {}
                src = FileSource(where, format="raw", **kw)
                files = src.files
                try:
                    return list(zip(files.keys, files.sizes, files.etags, strict=True))
                finally:
                    src.close()

            return run

        ways = {
            "list_info s3": listed,
            "FileSource s3": opened("s3://b/train"),
            "FileSource local": opened(str(folder)),
        }
        for what, run in ways.items():
            run()  # warm: the server's names, the page cache
            got: dict[str, list[tuple[float, float, str]]] = {"running": [], "paused": []}
            for r in range(args.rounds):
                for name in ("running", "paused") if r % 2 == 0 else ("paused", "running"):
                    side(name)
                    gc.collect()
                    collecting[0] = 0.0
                    t = time.perf_counter()
                    rows = run()
                    dt = time.perf_counter() - t
                    text = "".join(f"{k}\0{s}\0{e}\n" for k, s, e in rows)
                    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
                    got[name].append((dt, collecting[0], digest))
            for name, trials in got.items():
                wall = statistics.median(t[0] for t in trials)
                spent = statistics.median(t[1] for t in trials)
                out(
                    f"{what}, {args.keys:,} keys, collector {name}: {wall:.3f} s "
                    f"({min(t[0] for t in trials):.3f}-{max(t[0] for t in trials):.3f}), "
                    f"collecting {spent:.3f} s, sha256 {sorted({t[2] for t in trials})}"
                )
            ratio = statistics.median(t[0] for t in got["running"]) / statistics.median(
                t[0] for t in got["paused"]
            )
            out(f"{what}: paused {ratio:.2f}x faster")
        side("paused")
        store.close()


if __name__ == "__main__":
    main()
