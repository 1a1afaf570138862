"""HDF5 on S3: fetching the chunks a read asks (by ranges) vs each object whole.

    PYTHONPATH=src python benchmarks/hdf5_ranges_s3.py [--files 8] [--slices 400]
        [--side 128] [--steps 8] [--batch 16] [--latency-ms 20] [--rounds 2] [--json OUT]

``--files`` HDF5 files of ``--slices`` float32 fields of ``side x side`` (a smooth
field plus noise, gzip + shuffle, one field a chunk: about 200 MB with the
defaults) are put on moto (127.0.0.1), reached through a ``LatencyProxy`` of
``--latency-ms`` per request. Each run reads ``--steps`` batches with
``shuffle="samples"`` through a ``Loader``, in its own process (its own peak
RSS), alternating ``whole`` (``hdf5_ranges_above=None``: each file a read
touches is fetched whole) and ``ranges`` (``hdf5_ranges_above=0``: the file's
metadata, learned once, and the chunks holding the samples asked), A B A B.
Reported per side (median of the rounds): seconds, bytes and GETs (the store's
``ObjectStats``), peak RSS, and the digests, which must be equal.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from _out import out

from headrace.emulate import LatencyProxy, LocalS3

BUCKET = "hdf5-ranges"
SIDES = {"whole": None, "ranges": 0}

_CHILD = """
import json, sys, time
from headrace.formats import FileSource
from headrace.pipeline import Loader
from headrace.testing import batch_digest
url, endpoint, slices, above, steps, batch, opts = sys.argv[1:8]
options = {**json.loads(opts), "endpoint": endpoint}
src = FileSource(url, store_options=options, format="hdf5", datasets=("/fields/t2m",),
                 samples_per_file=int(slices), shuffle="samples",
                 hdf5_ranges_above=None if above == "None" else int(above))
t = time.perf_counter()
with Loader(src, batch_size=int(batch), seed=0, steps=int(steps)) as loader:
    digest = batch_digest(loader)
s = time.perf_counter() - t
st = src.files.store.stats
# VmHWM, not ru_maxrss: Linux keeps ru_maxrss across exec, so a child of this
# (moto-holding) parent started at the parent's RSS.
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM"))
print(json.dumps({"s": s, "digest": digest, "bytes": st.bytes, "gets": st.requests,
                  "rss": hwm * 1024}))
"""


def _write(path: Path, slices: int, side: int, seed: int) -> None:
    import h5py

    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:side, 0:side] / side
    with h5py.File(path, "w") as f:
        ds = f.create_dataset(
            "/fields/t2m",
            shape=(slices, side, side),
            dtype=np.float32,
            chunks=(1, side, side),
            compression="gzip",
            shuffle=True,
        )
        for i in range(0, slices, 50):
            n = min(50, slices - i)
            phase = rng.uniform(0, 6.28, (n, 1, 1))
            base = 280 + 10 * np.sin(6.28 * xx + phase) * np.cos(6.28 * yy)
            ds[i : i + n] = (base + rng.normal(0, 1, (n, side, side))).astype(np.float32)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--files", type=int, default=8)
    p.add_argument("--slices", type=int, default=400)
    p.add_argument("--side", type=int, default=128)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--latency-ms", type=float, default=20.0)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--json", type=Path, default=None)
    a = p.parse_args()
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in SIDES}
    with tempfile.TemporaryDirectory(prefix="headrace-h5ranges-") as tmp:
        root = Path(tmp)
        for i in range(a.files):
            _write(root / f"f{i:03d}.h5", a.slices, a.side, i)
        size = sum(f.stat().st_size for f in root.glob("*.h5"))
        out(
            f"{a.files} files x {a.slices} gzip fields of {a.side}x{a.side} float32, "
            f"{size / 1e6:.1f} MB; {a.steps} steps of {a.batch}, shuffle='samples', "
            f"{a.latency_ms:g} ms per request"
        )
        with LocalS3() as s3:
            s3.create_bucket(BUCKET)
            client = s3.info.boto3_client()
            for f in sorted(root.glob("*.h5")):
                client.put_object(Bucket=BUCKET, Key=f"h5/{f.name}", Body=f.read_bytes())
            opts = json.dumps({k: v for k, v in s3.info.store_options().items() if k != "endpoint"})
            with LatencyProxy(s3.endpoint, latency_ms=a.latency_ms) as proxy:
                for _ in range(a.rounds):
                    for side, above in SIDES.items():
                        proc = subprocess.run(
                            [sys.executable, "-c", _CHILD, f"s3://{BUCKET}/h5", proxy.endpoint,
                             str(a.slices), str(above), str(a.steps), str(a.batch), opts],
                            capture_output=True, text=True, check=True,
                        )  # fmt: skip
                        r = json.loads(proc.stdout.strip().splitlines()[-1])
                        runs[side].append(r)
                        out(f"  {side:6} {r['s']:.2f} s {r['bytes'] / 1e6:.1f} MB {r['gets']} GETs "
                            f"{r['rss'] / 1e6:.0f} MB RSS {r['digest'][:12]}")  # fmt: skip
    out("| side | s (median) | MB fetched | GETs | peak RSS MB | digest |")
    out("|---|---|---|---|---|---|")
    report: dict[str, Any] = {"args": vars(a) | {"json": None}, "bytes_on_store": size}
    digests = set()
    for side, rs in runs.items():
        med = {k: statistics.median(r[k] for r in rs) for k in ("s", "bytes", "gets", "rss")}
        digests |= {r["digest"] for r in rs}
        report[side] = {"median": med, "runs": rs}
        out(
            f"| {side} | {med['s']:.2f} | {med['bytes'] / 1e6:.1f} | {med['gets']:.0f} | "
            f"{med['rss'] / 1e6:.0f} | {rs[0]['digest'][:16]} |"
        )
    report["digests_equal"] = len(digests) == 1
    out("digests equal" if len(digests) == 1 else f"DIGESTS DIFFER: {sorted(digests)}")
    if a.json:
        a.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0 if len(digests) == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
