"""Random 4 KiB reads: thread engine vs io_uring engine vs fio, same file, same minutes.

    python benchmarks/io_uring_fio.py FILE [--mode odirect --reads 8192 --depths 1,32
                                            --trials 2 --warm 0 --batch 0
                                            --fio /usr/bin/fio --fio-seconds 3 --json OUT]

Each trial runs every side once, in alternating order (A B C ..., ... C B A),
so drift (other tenants, the host's cache) hits all sides alike. Sides:
``threads@q`` and ``uring@q`` (``RangeReader`` with strategy ``--mode``,
``max_gap=0``, ``in_flight=q``, the given engine) and, for ``odirect`` where
the binary exists, ``fio@q`` (``--direct=1 --rw=randread --bs=4k
--ioengine=io_uring --iodepth=q --randrepeat=0``, time-based). ``--mode
pread`` reads through the page cache, dropping the file's cached pages
(``POSIX_FADV_DONTNEED``) before every side; fio is not run then, since its
buffered reads would be served by pages it read earlier in the same run.

Two regimes. Cold (``--warm 0``): every headrace side reads its own disjoint
set of blocks from the whole file (a seeded permutation cut into stripes),
and fio random blocks of the whole file. ``--randrepeat=0`` matters: fio's
default replays one seeded sequence, which a virtual disk's host then serves
from its cache (measured here: 53-61k IOPS at depth 32 with the default,
24-26k without). Warm (``--warm BYTES``): the first BYTES of the file are read
once (sequential O_DIRECT), then every side, fio included (``--size``),
reads random blocks of that region, which the host serves from memory: the
regime where the per-read CPU cost decides.

Reads come in calls of ``--batch`` (0: all of a side's reads in one call, as
``headrace probe`` does). Each side's output is checked against a plain
``os.pread`` of the same blocks outside the timed interval, and a final
untimed pass reads one common set through every headrace side, which must
give one SHA-256 digest. Reports median IOPS and CPU per side, the ratios
that matter, and the digests. The file is only read.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from headrace.io import RangeReader, ReaderConfig
from headrace.io._uring import ring_pool

BLOCK = 4096


def parse_size(text: str) -> int:
    """``268435456``, ``256M``, ``1G``: bytes."""
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    t = text.strip().lower().removesuffix("ib").removesuffix("b")
    try:
        return int(float(t[:-1]) * units[t[-1]]) if t and t[-1] in units else int(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (try 256M)") from None


def reader(mode: str, engine: str, depth: int) -> RangeReader:
    cfg = ReaderConfig(strategy=mode, engine=engine, in_flight=depth, max_gap=0)  # type: ignore[arg-type]
    return RangeReader(cfg)


def read_blocks(path: str, mode: str, engine: str, depth: int, blocks: np.ndarray, batch: int):
    """``(seconds, cpu seconds, sha256, engine that ran)`` for ``blocks`` in calls of ``batch``."""
    ranges = np.stack([blocks * BLOCK, np.full(len(blocks), BLOCK)], 1)
    step = batch or len(ranges)
    h = hashlib.sha256()
    with reader(mode, engine, depth) as r:
        f = r.file(path)  # open before the clock starts
        if mode == "odirect":
            _ = f.direct_fd
        else:
            os.posix_fadvise(f.fd, 0, 0, os.POSIX_FADV_DONTNEED)
        c0, t0 = time.process_time(), time.perf_counter()
        got = [r.read(path, ranges[i : i + step]) for i in range(0, len(ranges), step)]
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
        ran = r.stats.engine
    for part in got:
        for g in part:
            h.update(g.tobytes())
    return seconds, cpu, h.hexdigest(), ran


def warm_up(path: str, nbytes: int) -> None:
    """Read ``[0, nbytes)`` once with O_DIRECT, so the host (not the guest) caches it."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    buf = np.empty(2 << 20, dtype=np.uint8)
    view = memoryview(buf[(-buf.ctypes.data) % BLOCK :][: 1 << 20])
    try:
        for o in range(0, nbytes, 1 << 20):
            os.preadv(fd, [view], o)
    finally:
        os.close(fd)


def reference(path: str, blocks: np.ndarray) -> str:
    h = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY)
    try:
        for b in blocks.tolist():
            h.update(os.pread(fd, BLOCK, b * BLOCK))
    finally:
        os.close(fd)
    return h.hexdigest()


def run_fio(fio: str, path: str, depth: int, seconds: float, region: int) -> float:
    cmd = [
        fio, "--name=r", f"--filename={path}", "--readonly", "--direct=1", "--rw=randread",
        "--bs=4k", "--ioengine=io_uring", f"--iodepth={depth}", f"--runtime={seconds}",
        "--time_based", "--randrepeat=0", f"--size={region}", "--output-format=json",
    ]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=seconds + 60)
    return float(json.loads(out.stdout)["jobs"][0]["read"]["iops"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file", help="an existing file (read only), at least a few MiB")
    ap.add_argument("--mode", choices=["odirect", "pread"], default="odirect")
    ap.add_argument("--reads", type=int, default=8192, help="reads per side per trial")
    ap.add_argument("--depths", default="1,32", help="in-flight depths, comma-separated")
    ap.add_argument("--trials", type=int, default=2)
    ap.add_argument("--batch", type=int, default=0, help="reads per call (0: all in one)")
    ap.add_argument(
        "--warm", type=parse_size, default=0, help="bytes at the start to warm and read, e.g. 256M"
    )
    ap.add_argument("--fio", default=shutil.which("fio") or "", help="fio binary ('' to skip)")
    ap.add_argument("--fio-seconds", type=float, default=3.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args(argv)
    path = a.file
    if not ring_pool().available():
        print(f"io_uring is unavailable here: {ring_pool().reason}", file=sys.stderr)
        return 2
    depths = [int(d) for d in a.depths.split(",")]
    engines = ["threads", "uring"]
    fio = a.fio if a.mode == "odirect" else ""
    sides = [(kind, q) for q in depths for kind in [*engines, *(["fio"] if fio else [])]]
    headrace_sides = [(k, q) for k, q in sides if k != "fio"]
    size = os.stat(path).st_size
    region = min(a.warm, size) // BLOCK * BLOCK if a.warm else size // BLOCK * BLOCK
    n_blocks = region // BLOCK
    rng = np.random.default_rng(a.seed)
    stripes: Iterator[np.ndarray]
    if a.warm:
        if a.reads > n_blocks:
            print(f"--warm holds {n_blocks} blocks; --reads is {a.reads}", file=sys.stderr)
            return 2
        warm_up(path, region)
        stripes = (rng.choice(n_blocks, a.reads, replace=False) for _ in itertools.count())
    else:
        need = (a.trials * len(headrace_sides) + 1) * a.reads
        if need > n_blocks:
            print(f"{path}: need {need} distinct 4 KiB blocks; it has {n_blocks}", file=sys.stderr)
            return 2
        perm = rng.permutation(n_blocks)[:need]
        stripes = iter(np.split(perm, need // a.reads))
    iops: dict[str, list[float]] = {f"{k}@{q}": [] for k, q in sides}
    cpu: dict[str, list[float]] = {s: [] for s in iops}
    verified = dict.fromkeys(iops, True)
    ran: dict[str, set[str]] = {s: set() for s in iops}
    for t in range(a.trials):
        order = sides if t % 2 == 0 else sides[::-1]
        for kind, q in order:
            name = f"{kind}@{q}"
            if kind == "fio":
                iops[name].append(run_fio(fio, path, q, a.fio_seconds, region))
                continue
            blocks = next(stripes)
            seconds, cpu_s, digest, engine = read_blocks(path, a.mode, kind, q, blocks, a.batch)
            iops[name].append(len(blocks) / seconds)
            cpu[name].append(cpu_s / seconds)
            verified[name] &= digest == reference(path, blocks)
            ran[name].add(engine)
    common = next(stripes)
    digests = {
        f"{k}@{q}": read_blocks(path, a.mode, k, q, common, a.batch)[2] for k, q in headrace_sides
    }
    med = {s: statistics.median(v) for s, v in iops.items()}
    regime = f"warm (first {region:,} bytes)" if a.warm else "cold (whole file)"
    print(
        f"{path}: {a.mode} random 4 KiB, {regime}, {a.reads} reads per side per trial, "
        f"{a.trials} trials, batch {a.batch or a.reads}"
    )
    print(f"{'side':12} {'median IOPS':>12} {'cores':>6}  runs (IOPS)      engine   verified")
    for s, v in iops.items():
        runs = ", ".join(f"{x:,.0f}" for x in v)
        cores = f"{statistics.median(cpu[s]):.2f}" if cpu[s] else "-"
        eng = ",".join(sorted(ran[s])) or "-"
        ok = verified[s] if not s.startswith("fio") else "-"
        print(f"{s:12} {med[s]:>12,.0f} {cores:>6}  {runs:16} {eng:8} {ok}")
    ratios = {}
    lo, hi = min(depths), max(depths)
    for kind in [*engines, *(["fio"] if fio else [])]:
        if lo != hi:
            ratios[f"{kind}@{hi} / {kind}@{lo}"] = med[f"{kind}@{hi}"] / med[f"{kind}@{lo}"]
    for q in depths:
        ratios[f"uring@{q} / threads@{q}"] = med[f"uring@{q}"] / med[f"threads@{q}"]
        if fio:
            ratios[f"uring@{q} / fio@{q}"] = med[f"uring@{q}"] / med[f"fio@{q}"]
    for k, v in ratios.items():
        print(f"{k:28} {v:.2f}x")
    same = len(set(digests.values())) == 1
    print(f"common blocks, every headrace side: digest {next(iter(digests.values()))[:16]}... "
          f"identical={same}")  # fmt: skip
    if a.json is not None:
        report = {
            "file": path,
            "mode": a.mode,
            "regime": "warm" if a.warm else "cold",
            "region_bytes": region,
            "reads": a.reads,
            "trials": a.trials,
            "batch": a.batch,
            "iops": iops,
            "median_iops": med,
            "cores": cpu,
            "ratios": ratios,
            "verified": verified,
            "engines": {s: sorted(e) for s, e in ran.items()},
            "common_digests": digests,
            "identical": same,
        }
        a.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0 if same and all(verified.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
