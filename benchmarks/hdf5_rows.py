"""HDF5 volumes: decoding only the slices a read asks vs each file whole.

    PYTHONPATH=src python benchmarks/hdf5_rows.py [--files 8] [--slices 512] [--side 128]
        [--steps 32] [--batch 16] [--rounds 3] [--root DIR]

``--files`` HDF5 files of ``--slices`` float32 slices of ``side x side`` (values 0-3,
gzip + shuffle, one slice a chunk) are written once under ``--root``. Each round
reads ``--steps`` batches through a ``Loader`` with ``shuffle="samples"`` and
``"files"``, alternating ``on_corrupt="raise"`` (only the slices each read asks
are decoded) and ``"replace"`` (each file read is decoded whole, so that a file
is judged corrupt wherever its damage lies). Both sides must give one digest per
shuffle; each run is its own process, so peak RSS is its own.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from _out import out

_CHILD = """
import json, resource, sys, time
from headrace.formats import FileSource
from headrace.pipeline import Loader
from headrace.testing import batch_digest
root, shuffle, on_corrupt, steps, batch = sys.argv[1:6]
src = FileSource(root, format="hdf5", datasets=("/volumes/raw",), samples_per_file="header",
                 shuffle=shuffle, on_corrupt=on_corrupt)
t = time.perf_counter()
with Loader(src, batch_size=int(batch), seed=0, steps=int(steps)) as loader:
    digest = batch_digest(loader)
print(json.dumps({"s": time.perf_counter() - t, "digest": digest,
                  "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""


def _write(root: Path, files: int, slices: int, side: int) -> None:
    import h5py

    rng = np.random.default_rng(0)
    for i in range(files):
        path = root / f"v{i:03d}.h5"
        if path.exists():
            continue
        x = rng.integers(0, 4, (slices, side, side)).astype(np.float32)
        with h5py.File(path, "w") as f:
            f.create_dataset(
                "/volumes/raw", data=x, chunks=(1, side, side), compression="gzip", shuffle=True
            )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--files", type=int, default=8)
    p.add_argument("--slices", type=int, default=512)
    p.add_argument("--side", type=int, default=128)
    p.add_argument("--steps", type=int, default=32)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--root", default=os.path.join(tempfile.gettempdir(), "headrace-hdf5-rows"))
    a = p.parse_args()
    root = Path(a.root)
    root.mkdir(parents=True, exist_ok=True)
    _write(root, a.files, a.slices, a.side)
    size = sum(f.stat().st_size for f in root.glob("*.h5"))
    out(f"{a.files} files, {a.slices} slices of {a.side}x{a.side} float32, {size / 1e6:.1f} MB")
    out("| shuffle | on_corrupt (decodes) | s (median) | peak RSS MB (median) | digest |")
    out("|---|---|---|---|---|")
    for shuffle in ("samples", "files"):
        runs: dict[str, list[dict[str, object]]] = {"raise": [], "replace": []}
        for _ in range(a.rounds):
            for side in runs:
                args = [str(root), shuffle, side, str(a.steps), str(a.batch)]
                cmd = [sys.executable, "-c", _CHILD, *args]
                got = subprocess.run(cmd, capture_output=True, text=True, check=True)
                runs[side].append(json.loads(got.stdout))
        for side, what in (("raise", "slices asked"), ("replace", "whole files")):
            rs = runs[side]
            digests = {str(r["digest"])[:16] for r in rs}
            secs = statistics.median(float(str(r["s"])) for r in rs)
            rss = statistics.median(int(str(r["rss"])) for r in rs) / 2**20
            out(f"| {shuffle} | {side} ({what}) | {secs:.2f} | {rss:.0f} | {sorted(digests)} |")
        same = {str(r["digest"]) for rs in runs.values() for r in rs}
        out(f"{shuffle}: one digest on both sides:", len(same) == 1)


if __name__ == "__main__":
    main()
