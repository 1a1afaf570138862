"""What a user at scale meets: open time, memory and a step's cost at size.

    PYTHONPATH=src python benchmarks/scale.py [--cases tokens,hosts,...] [--root DIR]
        [--src TREE ...] [--rounds N] [--keep]

Each case runs in a fresh process (one per ``--src`` tree, sides alternating over
``--rounds``) on real formats with cheap bytes: sparse files (holes read as zeros),
a Megatron index written by headrace's writer, tiny files. Reported per case: seconds
to open, RSS after the open and its peak (``VmHWM``), the mean of a step over the steps
after the first at step 0 and at step 10**9 (``prefetch=0``: what the plan and read
cost, not hidden behind read-ahead), the state's JSON bytes, and a SHA-256 of what was
read (for sparse token files, of the plan: each sample's window and start; the bytes
are zeros). The sides of an A/B must agree on it.

Cases (each case's data is written under ``--root`` when its case comes, 1.0 GB of real
blocks at most, and deleted when it is done unless ``--keep``):

- ``tokens``: ``TokenSource`` over 100 sparse uint16 shards of 10 GiB (1.07 TB), B=8;
- ``hosts``: the same, read as host 4,095 of 4,096 (global batch 32,768, 8 a host);
- ``megatron``: one sparse ``.bin`` with a Megatron ``.idx`` of 50M documents (1.0 GB);
  also the bytes a worker process is sent for it (pickled) and the seconds to load them;
- ``megatron-docs``: the same with document positions (``positions="documents"``: the
  batches' ``position_ids`` in the digest), documents of 1 to 79 tokens (2.0G tokens);
  also (and for ``megatron-s3``) RSS after the steps, its anonymous part (not the page
  cache's) and its peak (``end_mb``, ``end_anon_mb``, ``end_peak_mb``: the starts held);
- ``megatron-s3``: a Megatron pair of 16M documents of 1 to 3 tokens (a 320 MB ``.idx``:
  two pieces, a 64 MB ``.bin`` of random tokens) on moto's S3 behind a ``LatencyProxy`` of 20 ms,
  read with document positions (``position_ids``: the batches' digest covers them);
  what a worker is sent too;
- ``parquet``, ``parquet-hosts``: ``TableSource`` over 10M rows of one int32 column in
  100 row groups, one host, then host 4,095 of 4,096;
- ``files``: ``FileSource`` over a folder of 200,000 files of 16 bytes (a stat a file),
  and what a worker is sent;
- ``s3``: ``FileSource`` over 20,000 objects on moto's S3 (``LocalS3``), listed 1,000 a
  page; the requests counted by a ``LatencyProxy`` (no latency);
- ``mixture``: a ``Mixture`` of 200 token sources (sparse 1 GiB files), B=256.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import os
import pickle
import shutil
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CASES = (
    "tokens",
    "hosts",
    "megatron",
    "megatron-docs",
    "megatron-s3",
    "parquet",
    "parquet-hosts",
    "files",
    "s3",
    "mixture",
)
FAR = 10**9  # the far step (a far sample, for batches larger than 1)


def rss_mb(field: str = "VmRSS") -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


# ------------------------------------------------------------------- datasets


def _sparse(path: Path, size: int) -> None:
    if not path.exists():
        with open(path, "wb") as f:
            f.truncate(size)


def build(case: str, root: Path) -> Path:
    """The dataset of ``case`` (written once)."""
    import numpy as np

    name = _data(case)
    d = root / name
    if (d / ".done").exists():
        return d
    d.mkdir(parents=True, exist_ok=True)
    if name == "tokens":
        for i in range(100):
            _sparse(d / f"shard-{i:03d}.bin", 10 << 30)
    elif name == "megatron":
        from headrace.formats import write_megatron_index

        n = 50_000_000
        _sparse(d / "m.bin", 2 * 40 * n)
        write_megatron_index(d / "m.idx", np.uint16, np.full(n, 40, dtype=np.int32))
    elif name == "megatron-docs":
        from headrace.formats import write_megatron_index

        lengths = (np.arange(50_000_000, dtype=np.int64) * 7919 % 79 + 1).astype(np.int32)
        _sparse(d / "m.bin", 2 * int(lengths.sum()))
        write_megatron_index(d / "m.idx", np.uint16, lengths)
    elif name == "megatron-s3":
        from headrace.formats import write_megatron_index

        lengths = (np.arange(16_000_000) % 3 + 1).astype(np.int32)
        tokens = np.random.default_rng(0).integers(0, 50_000, int(lengths.sum()), np.uint16)
        tokens.tofile(d / "m.bin")
        write_megatron_index(d / "m.idx", np.uint16, lengths)
    elif name == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        x = (np.arange(10_000_000, dtype=np.int64) * 7919 % 1_000_003).astype(np.int32)
        pq.write_table(pa.table({"x": x}), d / "t.parquet", row_group_size=100_000)
    elif name in ("files", "s3"):
        for i in range(200_000 if name == "files" else 20_000):
            (d / f"{i:06d}.bin").write_bytes(i.to_bytes(4, "little") * 4)
    elif name == "mixture":
        for i in range(200):
            _sparse(d / f"s{i:03d}.bin", 1 << 30)
    (d / ".done").touch()
    return d


def _data(case: str) -> str:
    """The folder of ``case``'s data (two cases share theirs)."""
    return {"hosts": "tokens", "parquet-hosts": "parquet"}.get(case, case)


# ------------------------------------------------------------------- one trial


def _digest(h: Any, batch: Any) -> None:
    import numpy as np

    for k in sorted(batch):
        h.update(np.ascontiguousarray(batch[k]).tobytes())


def _open(case: str, d: Path, extra: dict[str, Any]) -> Any:
    from headrace.formats import FileSource, TableSource, TokenSource
    from headrace.pipeline import Mixture

    if case in ("tokens", "hosts"):
        return TokenSource(sorted(d.glob("*.bin")), context=1024, dtype="uint16")
    if case == "megatron":
        return TokenSource(d / "m.bin", context=1024)
    if case == "megatron-docs":
        return TokenSource(d / "m.bin", context=1024, positions="documents")
    if case == "megatron-s3":
        return TokenSource(
            "s3://scale/f/m.bin",
            context=1024,
            positions="documents",
            store_options=extra["options"],
        )
    if case.startswith("parquet"):
        return TableSource(d / "t.parquet", columns=["x"])
    if case == "files":
        return FileSource(d, format="raw")
    if case == "s3":
        return FileSource("s3://scale/f/", format="raw", store_options=extra["options"])
    sources = {
        f"s{i:03d}": TokenSource(d / f"s{i:03d}.bin", context=256, dtype="uint16")
        for i in range(200)
    }
    weights = [1.0 + (i % 7) for i in range(200)]
    return Mixture(sources, [w / sum(weights) for w in weights], batch_size=256)


def trial(case: str, d: Path, extra: dict[str, Any]) -> dict[str, Any]:
    """Open, then time steps at step 0 and near sample 10**9; what the state holds."""
    import numpy as np

    from headrace.pipeline import Loader

    # Imported before the clock: a tree whose bytecode is not cached (PYTHONDONTWRITEBYTECODE)
    # compiles it at import (0.2 s), which is no part of an open.
    importlib.import_module("headrace.formats")

    before, anon = rss_mb(), rss_mb("RssAnon")
    t0 = time.perf_counter()
    src = _open(case, d, extra)
    opened = time.perf_counter() - t0
    got: dict[str, Any] = {
        "open_s": round(opened, 3),
        "rss_mb": round(rss_mb() - before, 1),
        "peak_mb": round(rss_mb("VmHWM"), 1),
    }
    if "proxy" in extra:
        got["requests"] = extra["proxy"].stats.requests
    world = 4096 if case.endswith("hosts") else 1
    batch = {"mixture": 256}.get(case, 8) * world
    steps = 8 if case == "mixture" else 128
    h = hashlib.sha256()
    with Loader(src, batch_size=batch, seed=7, rank=world - 1, world_size=world, prefetch=0) as ld:
        state = ld.state_dict()
        got["state_b"] = len(json.dumps(state))
        for at in (0, FAR // batch):
            # As a resume in a new process: step 0's windows released first (a jump in
            # one process also drains their reads: a mixture's first steps after it pay).
            src.close()
            ld.load_state_dict({**state, "step": at})
            it = iter(ld)
            t0 = time.perf_counter()
            _digest(h, next(it))  # a first step opens windows and files: timed apart
            if case == "megatron-docs":  # and finds the documents
                got[f"first_ms@{at and 'far'}"] = round((time.perf_counter() - t0) * 1e3, 1)
            t0 = time.perf_counter()
            for _ in range(steps):
                _digest(h, next(it))
            got[f"step_us@{at and 'far'}"] = round((time.perf_counter() - t0) / steps * 1e6)
            if case in ("tokens", "hosts", "megatron", "megatron-docs"):  # zeros: the plan
                samples = (at + np.arange(steps + 1)) * batch + batch - 1
                plan = src.layout.locate(7, samples)
                h.update(plan.window.tobytes() + plan.start.tobytes())
    got["sha256"] = h.hexdigest()[:12]
    if case in ("megatron-docs", "megatron-s3"):  # what the steps left held (the starts)
        got["end_mb"] = round(rss_mb() - before, 1)
        got["end_anon_mb"] = round(rss_mb("RssAnon") - anon, 1)  # not the page cache's
        got["end_peak_mb"] = round(rss_mb("VmHWM"), 1)
    if case in (
        "megatron",
        "megatron-docs",
        "megatron-s3",
        "files",
    ):  # what a worker is sent, and loads
        blob = pickle.dumps(src)
        t0 = time.perf_counter()
        pickle.loads(blob).close()
        got["worker_mb"] = round(len(blob) / 2**20, 2)
        got["worker_load_s"] = round(time.perf_counter() - t0, 3)
    src.close()
    return got


def child(side: str, case: str, root: Path) -> None:
    sys.path.insert(0, str(Path(side) / "src"))
    d = build(case, root)  # written by the parent's first call: here only found
    if case not in ("s3", "megatron-s3"):
        print(json.dumps(trial(case, d, {})))
        return
    from headrace.emulate import LatencyProxy, LocalS3

    with LocalS3() as s3:
        s3.create_bucket("scale")
        client = s3.info.boto3_client()

        def put(p: Path) -> None:
            client.put_object(Bucket="scale", Key=f"f/{p.name}", Body=p.read_bytes())

        with ThreadPoolExecutor(16) as pool:
            list(pool.map(put, sorted(d.glob("*.bin")) + sorted(d.glob("*.idx"))))
        with LatencyProxy(s3.endpoint, latency_ms=20 if case == "megatron-s3" else 0) as proxy:
            options = {**s3.info.store_options(), "endpoint": proxy.endpoint}
            _forget_peak()  # the upload's: the trial's peak is the open's
            print(json.dumps(trial(case, d, {"options": options, "proxy": proxy})))


def _forget_peak() -> None:
    """Reset this process's peak RSS (``VmHWM``) to its RSS now (Linux 4.0 and later)."""
    if os.path.exists("/proc/self/clear_refs"):
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")


# ------------------------------------------------------------------- the table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--root", type=Path, default=Path("/tmp/headrace-scale"))
    ap.add_argument("--src", action="append", help="a source tree (repeat for an A/B)")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--keep", action="store_true", help="keep the datasets for another run")
    ap.add_argument("--child", nargs=3, metavar=("SIDE", "CASE", "ROOT"), help=argparse.SUPPRESS)
    ap.add_argument("--build", nargs=3, metavar=("SIDE", "CASE", "ROOT"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child or a.build:
        side, case, root = a.child or a.build
        if a.build:  # in a process of its own: its arrays are in no trial's RSS
            sys.path.insert(0, str(Path(side) / "src"))
            build(case, Path(root))
            return
        child(side, case, Path(root))
        return
    sys.path.insert(0, str(HERE))
    from _children import alternate
    from _out import out

    cases = [c for c in a.cases.split(",") if c]
    unknown = sorted(set(cases) - set(CASES))
    if unknown:
        ap.error(f"unknown cases {unknown}; the cases are {', '.join(CASES)}")
    sides = a.src or [str(HERE.parent)]
    a.root.mkdir(parents=True, exist_ok=True)
    rows: list[tuple[str, str, dict[str, Any]]] = []
    try:
        for case in cases:
            t0 = time.perf_counter()
            build_args = ["--build", sides[0], case, str(a.root)]
            subprocess.run([sys.executable, __file__, *build_args], check=True)
            out(f"{case}: data ready in {time.perf_counter() - t0:.1f} s")
            got = alternate(__file__, sides, a.rounds, [case, str(a.root)])
            rows += [(case, s, _medians(got[s])) for s in sides]
            if not a.keep:  # one case's blocks at a time (under 2 GB)
                shutil.rmtree(a.root / _data(case), ignore_errors=True)
    finally:
        if not a.keep:
            shutil.rmtree(a.root, ignore_errors=True)
    out(f"medians of {a.rounds} round(s); sha256: each side's (all rounds)")
    out("| case | side | " + " | ".join(COLUMNS) + " |")
    out("|---|---|" + "---:|" * len(COLUMNS))
    for case, side, t in rows:
        name = os.path.basename(os.path.abspath(side))
        out(f"| {case} | {name} | " + " | ".join(str(t.get(k, "-")) for k in COLUMNS) + " |")


COLUMNS = (
    "open_s",
    "rss_mb",
    "peak_mb",
    "requests",
    "step_us@0",
    "step_us@far",
    "first_ms@0",
    "first_ms@far",
    "end_mb",
    "end_anon_mb",
    "end_peak_mb",
    "state_b",
    "worker_mb",
    "worker_load_s",
    "sha256",
)


def _medians(trials: list[dict[str, Any]]) -> dict[str, Any]:
    """Each figure's median over the trials; the digests, all that were seen."""
    keys = {k for t in trials for k in t}
    got: dict[str, Any] = {
        k: round(statistics.median(t[k] for t in trials), 3) for k in keys if k != "sha256"
    }
    got["sha256"] = "/".join(sorted({t["sha256"] for t in trials}))
    return got


if __name__ == "__main__":
    main()
