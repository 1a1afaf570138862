"""NPY (or HDF5) files of many samples under shuffle="samples": the rows a read asks vs
each file whole.

    PYTHONPATH=src python benchmarks/npy_rows.py --before OLD_SRC [--files 16] [--rows 1000]
        [--side 64] [--steps 8] [--batch 16] [--rounds 3] [--where local,s3] [--latency-ms 0]
        [--format npy|hdf5|npz]

``--where slowfs``: the files through a slowfs FUSE mount whose READs and opens wait
``--latency-ms`` (2 if 0), a network mount's round trips (slowfs drops a file's pages
at each open: every run reads cold).

``--files`` NPY files (``--format hdf5``: HDF5 files of one dataset ``x``, a chunk a
sample, unfiltered; ``--format npz``: ``np.savez`` files, stored, whose "before" side
is this tree with ``npz_ranges_above=None`` and "after" with ``0``) of ``--rows``
float32 samples of ``side x side`` are written
once (locally, and put on moto at 127.0.0.1 for ``s3``, reached through a
``LatencyProxy`` of ``--latency-ms`` per request where that is not 0). Each run reads ``--steps``
batches through a ``Loader`` with ``shuffle="samples"``, in its own process, with
this tree's ``src`` and with ``--before`` (an older ``src``: ``git archive REV src |
tar -x -C /tmp/old``), alternating. Reported per side (medians): seconds, bytes read
(locally the fetch window's count; on S3 the store's bytes and GETs), the bytes read
over the samples' bytes (amplification), and the digests, which must be equal.
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
from typing import Any

import numpy as np
from _out import out

BUCKET = "npy-rows"

_CHILD = """
import json, sys, time
from headrace.formats import FileSource
from headrace.pipeline import Loader
from headrace.testing import batch_digest
url, rows, steps, batch, opts, fmt = sys.argv[1:7]  # argv[7]: the side
options = json.loads(opts)
kw = {"store_options": options} if options else {}
if fmt == "hdf5":
    kw["datasets"] = ("x",)
if fmt == "npz" and sys.argv[7] == "after":  # opt-in (a stored member's CRC goes unchecked)
    kw["npz_ranges_above"] = 0
src = FileSource(url, format=fmt, samples_per_file=int(rows), shuffle="samples", **kw)
t = time.perf_counter()
with Loader(src, batch_size=int(batch), seed=0, steps=int(steps)) as loader:
    digest = batch_digest(loader)
s = time.perf_counter() - t
st = src.files.store.stats if src.files.remote else None
print(json.dumps({"s": s, "digest": digest, "bytes": st.bytes if st else src.stats.bytes,
                  "gets": st.requests if st else src.stats.fetches}))
"""


def _run(tree: str, args: list[str]) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": tree}
    cmd = [sys.executable, "-c", _CHILD, *args]
    got = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)
    return dict(json.loads(got.stdout.strip().splitlines()[-1]))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", default="", help="an older tree's src directory (not npz)")
    p.add_argument("--files", type=int, default=16)
    p.add_argument("--rows", type=int, default=1000)
    p.add_argument("--side", type=int, default=64)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--where", default="local,s3")
    p.add_argument("--latency-ms", type=float, default=0.0)
    p.add_argument("--format", choices=("npy", "hdf5", "npz"), default="npy")
    p.add_argument("--root", default=None)
    a = p.parse_args()
    ext = {"hdf5": "h5"}.get(a.format, a.format)
    # Named by the shape: files kept from a run of another shape are not read as these.
    shape = f"{a.format}-rows-{a.files}x{a.rows}x{a.side}"
    root = Path(a.root or os.path.join(tempfile.gettempdir(), f"headrace-{shape}"))
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for i in range(a.files):
        path = root / f"f{i:03d}.{ext}"
        if path.exists():
            continue
        x = rng.standard_normal((a.rows, a.side, a.side), dtype=np.float32)
        if a.format == "hdf5":
            import h5py

            with h5py.File(path, "w") as f:
                f.create_dataset("x", data=x, chunks=(1, a.side, a.side))
        elif a.format == "npz":
            np.savez(path, x=x)
        else:
            np.save(path, x)
    used = a.steps * a.batch * a.side * a.side * 4
    size = sum(f.stat().st_size for f in root.glob(f"*.{ext}"))
    out(
        f"{a.files} {a.format} files x {a.rows} samples of {a.side}x{a.side} float32 "
        f"({size / 1e6:.0f} MB); {a.steps} steps of {a.batch}, shuffle='samples'; "
        f"{used / 1e6:.2f} MB of samples"
    )
    here = str(Path(__file__).resolve().parent.parent / "src")
    before = here if a.format == "npz" else str(Path(a.before).resolve())
    trees = {"before": before, "after": here}
    ok = True
    for where in a.where.split(","):
        runs: dict[str, list[dict[str, Any]]] = {side: [] for side in trees}
        s3 = proxy = mount = None
        if where == "s3":
            from headrace.emulate import LatencyProxy, LocalS3

            s3 = LocalS3().__enter__()
            s3.create_bucket(BUCKET)
            client = s3.info.boto3_client()
            for f in sorted(root.glob(f"*.{ext}")):
                client.put_object(Bucket=BUCKET, Key=f"npy/{f.name}", Body=f.read_bytes())
            options = s3.info.store_options()
            if a.latency_ms:
                proxy = LatencyProxy(s3.endpoint, latency_ms=a.latency_ms).__enter__()
                options["endpoint"] = proxy.endpoint
            url, opts = f"s3://{BUCKET}/npy", json.dumps(options)
        elif where == "slowfs":  # a FUSE mount of the files: each READ waits latency_ms
            from headrace.emulate import SlowMount

            mnt = Path(tempfile.mkdtemp(prefix="headrace-npy-rows-mnt-"))
            ms = a.latency_ms or 2.0
            mount = SlowMount(root, mnt, read_latency_ms=ms, open_latency_ms=ms).__enter__()
            url, opts = str(mnt), "{}"
        else:
            url, opts = str(root), "{}"
        try:
            for _ in range(a.rounds):
                for side, tree in trees.items():
                    args = [url, str(a.rows), str(a.steps), str(a.batch), opts, a.format, side]
                    r = _run(tree, args)
                    runs[side].append(r)
                    out(f"  {where} {side:6} {r['s']:.3f} s {r['bytes'] / 1e6:.1f} MB "
                        f"{r['gets']} reads {r['digest'][:12]}")  # fmt: skip
        finally:
            if mount is not None:
                mount.__exit__(None, None, None)
            if proxy is not None:
                proxy.__exit__(None, None, None)
            if s3 is not None:
                s3.__exit__(None, None, None)
        out(f"| {where} | side | s (median) | MB read | reads | amplification | digest |")
        out("|---|---|---|---|---|---|---|")
        digests = set()
        for side, rs in runs.items():
            med = {k: statistics.median(r[k] for r in rs) for k in ("s", "bytes", "gets")}
            digests |= {r["digest"] for r in rs}
            mb, amp = med["bytes"] / 1e6, med["bytes"] / used
            out(
                f"| {where} | {side} | {med['s']:.3f} | {mb:.1f} | {med['gets']:.0f} | "
                f"{amp:.1f}x | {rs[0]['digest'][:16]} |"
            )
        b, f = (statistics.median(r["s"] for r in runs[s]) for s in ("before", "after"))
        out(f"{where}: {b / f:.1f}x faster;", "digests equal" if len(digests) == 1 else "DIFFER")
        ok = ok and len(digests) == 1
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
