"""Shared helpers for the resource-hygiene audit scripts (run with PYTHONPATH=src)."""

from __future__ import annotations

import gc
import os
import threading
import time
from pathlib import Path

import numpy as np


def fds() -> dict[int, str]:
    out = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            out[int(name)] = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            pass
    return out


def children() -> list[int]:
    pids = []
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/children") as fh:
                pids += [int(p) for p in fh.read().split()]
        except OSError:
            pass
    return sorted(pids)


def shm() -> set[str]:
    return {n for n in os.listdir("/dev/shm") if n.startswith(("headrace", "psm_", "torch_"))}


def rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def maps() -> int:
    with open("/proc/self/maps") as fh:
        return sum(1 for _ in fh)


def snapshot(settle_s: float = 2.0) -> dict:
    """Resources now, after threads that are on their way out have left (up to settle_s)."""
    gc.collect()
    deadline = time.monotonic() + settle_s
    n = threading.active_count()
    while time.monotonic() < deadline:
        time.sleep(0.1)
        gc.collect()
        m = threading.active_count()
        if m == n:
            break
        n = m
    return {
        "fds": fds(),
        "threads": sorted(t.name for t in threading.enumerate()),
        "native_threads": len(os.listdir("/proc/self/task")),
        "children": children(),
        "shm": shm(),
        "rss_mb": rss_mb(),
        "maps": maps(),
    }


def diff(a: dict, b: dict, label: str, rss_slack_mb: float = 30.0) -> list[str]:
    bad = []
    new_fds = {k: v for k, v in b["fds"].items() if k not in a["fds"]}
    if new_fds:
        bad.append(f"fds +{len(new_fds)}: {sorted(set(new_fds.values()))[:6]}")
    if len(b["threads"]) > len(a["threads"]):
        extra = list(b["threads"])
        for t in a["threads"]:
            if t in extra:
                extra.remove(t)
        bad.append(f"threads {len(a['threads'])} -> {len(b['threads'])}: {extra[:8]}")
    if b["native_threads"] > a["native_threads"] + 16:  # obstore/arrow native pools grow lazily
        bad.append(f"native threads {a['native_threads']} -> {b['native_threads']}")
    if set(b["children"]) - set(a["children"]):
        bad.append(f"children {a['children']} -> {b['children']}")
    if b["shm"] - a["shm"]:
        bad.append(f"/dev/shm + {sorted(b['shm'] - a['shm'])[:5]}")
    if b["rss_mb"] - a["rss_mb"] > rss_slack_mb:
        bad.append(f"rss {a['rss_mb']:.0f} -> {b['rss_mb']:.0f} MB")
    if b["maps"] - a["maps"] > 50:
        bad.append(f"mappings {a['maps']} -> {b['maps']}")
    status = "LEAK " + "; ".join(bad) if bad else "ok"
    print(
        f"{label:50s} {status}  (fds {len(a['fds'])}->{len(b['fds'])}, threads "
        f"{len(a['threads'])}->{len(b['threads'])}, rss {a['rss_mb']:.0f}->{b['rss_mb']:.0f} MB,"
        f" maps {a['maps']}->{b['maps']})",
        flush=True,
    )
    return bad


def make_data(root: Path) -> dict[str, object]:
    """Small real files of every kind the sources read."""
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    out: dict[str, object] = {}
    tok = rng.integers(0, 50_000, 2_000_000, dtype=np.uint16)
    (root / "train.bin").write_bytes(tok.tobytes())
    tok2 = rng.integers(0, 50_000, 1_000_000, dtype=np.uint16)
    (root / "other.bin").write_bytes(tok2.tobytes())
    out["tokens"] = root / "train.bin"
    out["tokens2"] = root / "other.bin"
    rows = rng.integers(1, 30_000, (4000, 65), dtype=np.int32)
    np.save(root / "rows.npy", rows)
    np.save(root / "mask.npy", (rows % 3 != 0).astype(np.uint8))
    out["rows"] = (root / "rows.npy", root / "mask.npy")
    from headrace.formats import write_row_file

    for name, w in {"anchor": 33, "positive": 17}.items():
        write_row_file(root / f"{name}.tok.bin", rng.integers(1, 30_000, (500, w), dtype=np.uint32))
    out["pairs"] = {n: root / f"{n}.tok.bin" for n in ("anchor", "positive")}
    import pyarrow as pa
    import pyarrow.parquet as pq

    lens = rng.integers(5, 40, 3000)
    ids = [rng.integers(0, 1000, n, dtype=np.int32) for n in lens]
    tbl = pa.table({"input_ids": pa.array(ids, type=pa.list_(pa.int32()))})
    (root / "table").mkdir(exist_ok=True)
    pq.write_table(tbl, root / "table" / "part-0.parquet", row_group_size=300)
    out["table"] = root / "table"
    (root / "npy").mkdir(exist_ok=True)
    from headrace.formats import synthetic_arrays, write_sample_file

    for i in range(24):
        arrays = synthetic_arrays("npy", seed=i, shape=(8, 6, 3), samples_per_file=2)
        write_sample_file("npy", root / "npy" / f"s{i:02d}.npy", arrays)
    out["npy"] = root / "npy"
    return out


def prewarm_pools() -> None:
    """Start every thread of the process-wide pools, so lazy growth is not read as a leak."""
    from headrace.io._pool import _ALL

    for pool in _ALL:
        n = pool.threads
        barrier = threading.Barrier(n + 1)
        ex = pool.get()
        futs = [ex.submit(barrier.wait) for _ in range(n)]
        barrier.wait()
        for f in futs:
            f.result()
