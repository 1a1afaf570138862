"""Deflated NPZ files of many samples: the rows a read asks kept, vs each member whole.

    PYTHONPATH=src python benchmarks/npz_rows.py --before OLD_SRC [--files 8] [--rows 64]
        [--row-kib 128] [--steps 8] [--batch 16] [--rounds 3] [--root DIR]

``--files`` NPZ files (``np.savez_compressed``) of one float32 member of ``--rows``
rows of ``--row-kib`` KiB (values 0-15) are written once under ``--root``. Each
round reads ``--steps`` batches through a ``Loader`` with ``shuffle="samples"`` and
``"files"``, once with this tree's ``src`` and once with ``--before`` (a copy of an
older ``src``, e.g. ``git archive REV src | tar -x -C /tmp/old``), alternating. Each
run is its own process (its own peak RSS); both sides must give one digest.
"""

from __future__ import annotations

import argparse
import io
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
root, shuffle, steps, batch, spf = sys.argv[1:6]
src = FileSource(root, format="npz", samples_per_file=int(spf), shuffle=shuffle)
t = time.perf_counter()
with Loader(src, batch_size=int(batch), seed=0, steps=int(steps)) as loader:
    digest = batch_digest(loader)
print(json.dumps({"s": time.perf_counter() - t, "digest": digest,
                  "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""


def _write(root: Path, files: int, rows: int, row_kib: int) -> None:
    rng = np.random.default_rng(0)
    for i in range(files):
        path = root / f"f{i:03d}.npz"
        if path.exists():
            continue
        x = rng.integers(0, 16, (rows, row_kib * 256)).astype(np.float32)
        buf = io.BytesIO()
        np.savez_compressed(buf, x=x)
        path.write_bytes(buf.getvalue())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", required=True, help="an older tree's src directory")
    p.add_argument("--files", type=int, default=8)
    p.add_argument("--rows", type=int, default=64)
    p.add_argument("--row-kib", type=int, default=128)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--root", default=os.path.join(tempfile.gettempdir(), "headrace-npz-rows"))
    a = p.parse_args()
    root = Path(a.root)
    root.mkdir(parents=True, exist_ok=True)
    _write(root, a.files, a.rows, a.row_kib)
    size = sum(f.stat().st_size for f in root.glob("*.npz"))
    member = a.rows * a.row_kib / 1024
    out(f"{a.files} files of {a.rows} rows of {a.row_kib} KiB ({member:.0f} MiB a member), "
        f"{size / 1e6:.1f} MB deflated")  # fmt: skip
    here = str(Path(__file__).resolve().parent.parent / "src")
    trees = {"before": str(Path(a.before).resolve()), "after": here}
    out("| shuffle | side | s (median) | peak RSS MB (median) | digest |")
    out("|---|---|---|---|---|")
    for shuffle in ("samples", "files"):
        runs: dict[str, list[dict[str, object]]] = {side: [] for side in trees}
        for _ in range(a.rounds):
            for side, tree in trees.items():
                args = [str(root), shuffle, str(a.steps), str(a.batch), str(a.rows)]
                env = {**os.environ, "PYTHONPATH": tree}
                cmd = [sys.executable, "-c", _CHILD, *args]
                got = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)
                runs[side].append(json.loads(got.stdout))
        for side, rs in runs.items():
            digests = {str(r["digest"])[:16] for r in rs}
            secs = statistics.median(float(str(r["s"])) for r in rs)
            rss = statistics.median(int(str(r["rss"])) for r in rs) / 2**20
            out(f"| {shuffle} | {side} | {secs:.2f} | {rss:.0f} | {sorted(digests)} |")
        same = {str(r["digest"]) for rs in runs.values() for r in rs}
        out(f"{shuffle}: one digest on both sides:", len(same) == 1)


if __name__ == "__main__":
    main()
