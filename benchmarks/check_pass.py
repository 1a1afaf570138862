"""What ``check(source)`` costs against one plain pass over the same files.

    python benchmarks/check_pass.py [--root DIR] [--files 2000] [--bad 20] [--batch 64]
                                    [--trials 3]

Writes (once) ``--files`` JPEGs of 128 x 128 and a copy of the set with ``--bad`` of
them cut to garbage, then times, in alternating order after one warm-up each: a plain
``Loader(epochs=1)`` pass over the clean set (every sample read and decoded once),
``check()`` on the clean set, and ``check()`` on the damaged one. Reports the median
seconds of each, the ratios to the plain pass, the SHA-256 of the plain pass's
batches (taken in the warm-up: the timed passes hash nothing, as a check does not),
and the problems each check listed, which must be 0 and ``--bad``.
Predicted: a clean check costs what the pass does (the same reads); a damaged one
re-reads each failing batch about twice more while halving it (``B + B/2 + ...``).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from _out import out

from headrace.formats import FileSource, synthetic_arrays, write_sample_file
from headrace.pipeline import Loader, check
from headrace.testing import batch_digest


def write(root: Path, files: int, bad: int) -> None:
    for name in ("clean", "damaged"):
        (root / name).mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    broken = set(rng.choice(files, bad, replace=False).tolist())
    for i in range(files):
        clean = root / "clean" / f"{i:05d}.jpg"
        if not clean.exists():
            image = synthetic_arrays("jpeg", seed=i, shape=(128, 128, 3))
            write_sample_file("jpeg", clean, image)
        body = clean.read_bytes()
        if i in broken:
            body = body[:20] + b"\x00garbage" * 8
        (root / "damaged" / clean.name).write_bytes(body)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=None)
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--bad", type=int, default=20)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--trials", type=int, default=3)
    args = ap.parse_args()
    root = args.root or Path(tempfile.mkdtemp(prefix="check-pass-"))
    write(root, args.files, args.bad)
    b = args.batch
    digests: set[str] = set()
    found: dict[str, set[int]] = {"check clean": set(), "check damaged": set()}

    def plain(digest: bool = False) -> None:
        src = FileSource(root / "clean", format="jpeg")
        with Loader(src, batch_size=b, epochs=1) as loader:
            if digest:  # outside the timed trials: a check hashes nothing
                digests.add(batch_digest(loader)[:12])
            else:
                for _ in loader:
                    pass
        src.close()

    def checked(name: str) -> Callable[[], None]:
        def run() -> None:
            src = FileSource(root / name, format="jpeg")
            found[f"check {name}"].add(len(check(src, batch_size=b).problems))
            src.close()

        return run

    sides: dict[str, Callable[[], None]] = {
        "plain pass": plain,
        "check clean": checked("clean"),
        "check damaged": checked("damaged"),
    }
    times: dict[str, list[float]] = {k: [] for k in sides}
    plain(digest=True)  # warm-up (the page cache, the decoder), and the pass's digest
    for fn in sides.values():
        fn()
    for _ in range(args.trials):
        for name, fn in sides.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    base = statistics.median(times["plain pass"])
    out(f"{args.files} JPEGs 128x128, batch {b}, {args.trials} alternating trials (medians):")
    for name, ts in times.items():
        med = statistics.median(ts)
        extra = f"digest {sorted(digests)}" if name == "plain pass" else f"problems {found[name]}"
        out(f"  {name:14s} {med:6.2f} s  {med / base:5.2f}x  {extra}")


if __name__ == "__main__":
    main()
