"""Samples of several shapes through HeadraceDataLoader workers: two source trees A/B/A/B.

    python benchmarks/torch_ragged_ab.py --a /tmp/base/src --b src [--rounds 6]

Images of several sizes come from a source as an ``object`` array of
per-sample arrays, which the workers' ring used to pickle through the pipe
(a copy into the pickle, two through the pipe, one out of it) and now copies
into a shared-memory slot, one region a sample. This times
``HeadraceDataLoader(TorchDataset(FileSource(...), ragged=(key,)),
num_workers=2)`` over two folders of 256 samples of 5 x 7 sizes (200-348 x
260-398 pixels, RGB): ``jpeg`` (decoding dominates) and ``npy`` (raw arrays:
the transport is nearly all the work). Each round runs a child process per
tree (A, B, then B, A next round, so neither always goes first); each child
times its batches after the first (the workers' start-up left out), and counts
the main process's CPU seconds. Reports medians per side and kind, B/A, the
chunks that went through the pipe, and the SHA-256 over every sample's dtype,
shape and bytes (which must agree).
"""

from __future__ import annotations

import hashlib
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from _trees_ab import tree_parser, tree_runs

N, BATCH = 256, 16
STEPS = {"jpeg": 48, "npy": 96}


def make_data(root: Path) -> None:
    from PIL import Image

    rng = np.random.default_rng(0)
    for kind in STEPS:
        (root / kind).mkdir(exist_ok=True)
    for i in range(N):
        if (root / "npy" / f"{i:04d}.npy").exists():
            continue
        h, w = 200 + 37 * (i % 5), 260 + 23 * (i % 7)
        a = np.cumsum(rng.integers(0, 8, (h, w, 3), dtype=np.uint8), axis=1, dtype=np.uint8)
        Image.fromarray(a).save(root / "jpeg" / f"{i:04d}.jpg", quality=90)
        np.save(root / "npy" / f"{i:04d}.npy", a)


def child(root: Path) -> dict[str, dict[str, object]]:
    """Runs in a child process with one tree on sys.path."""
    from headrace.formats import FileSource
    from headrace.torch import HeadraceDataLoader, TorchDataset

    out: dict[str, dict[str, object]] = {}
    for kind, steps in STEPS.items():
        key = "image" if kind == "jpeg" else "data"
        src = FileSource(root / kind, format=kind, shuffle="files")
        ds = TorchDataset(src, batch_size=BATCH, seed=0, steps=steps, ragged=(key,))
        h = hashlib.sha256()
        with HeadraceDataLoader(ds, num_workers=2) as dl:
            it = iter(dl)
            batches = [next(it)]
            t0, c0 = time.perf_counter(), time.process_time()
            batches += list(it)
            dt, cpu = time.perf_counter() - t0, time.process_time() - c0
            assert dl._workers is not None
            pickled = dl._workers.pickled_chunks
        for b in batches:
            for t in b[key]:  # type: ignore[union-attr]
                a = t.numpy()
                h.update(f"{a.dtype.str}{a.shape}".encode())
                h.update(a.tobytes())
        n = len(batches) - 1
        out[kind] = {
            "batches_s": n / dt,
            "main_cpu_ms": cpu / n * 1e3,
            "pickled": pickled,
            "sha256": h.hexdigest()[:16],
        }
        src.close()
    return out


def main() -> None:
    ap = tree_parser(__doc__)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(Path(args.child))))
        return
    root = Path(args.root or tempfile.mkdtemp(prefix="torch-ragged-ab-"))
    root.mkdir(parents=True, exist_ok=True)
    make_data(root)
    runs: dict[str, list[dict[str, dict[str, object]]]] = {"A": [], "B": []}
    for side, got in tree_runs(__file__, args, [str(root)]):
        runs[side].append(got)
        print(side, " ".join(f"{k} {float(v['batches_s']):6.1f}/s" for k, v in got.items()))
    for kind in STEPS:
        med = {
            side: {
                m: statistics.median(float(r[kind][m]) for r in runs[side])  # type: ignore[arg-type]
                for m in ("batches_s", "main_cpu_ms")
            }
            for side in runs
        }
        digests = {side: {str(r[kind]["sha256"]) for r in runs[side]} for side in runs}
        pickled = {side: sorted({int(r[kind]["pickled"]) for r in runs[side]}) for side in runs}  # type: ignore[call-overload]
        print(
            f"{kind}: batches/s A {med['A']['batches_s']:.1f} B {med['B']['batches_s']:.1f} "
            f"(B/A {med['B']['batches_s'] / med['A']['batches_s']:.2f}); main-process CPU "
            f"ms/batch A {med['A']['main_cpu_ms']:.2f} B {med['B']['main_cpu_ms']:.2f}; "
            f"chunks pickled A {pickled['A']} B {pickled['B']}; sha256 A {digests['A']} "
            f"B {digests['B']}"
        )
        if len(digests["A"] | digests["B"]) != 1:
            raise SystemExit(f"{kind}: the trees' samples differ")


if __name__ == "__main__":
    main()
