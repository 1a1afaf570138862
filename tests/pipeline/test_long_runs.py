"""Long runs and open/close cycles hold what their first steps held (docs/long-runs.md).

Counted, never timed: descriptors by target, threads by pool, the objects the garbage
collector tracks, headrace's process-wide tables, and the heap ``tracemalloc`` traces,
each at two marks after a warm-up (the later one after four times the steps or cycles
of the first's stretch). A leak of one object or 100 bytes a step, or of one object or
2 KB a cycle, fails the bounds below; benchmarks/soak.py measures the same at 20,000
steps.
"""

from __future__ import annotations

import collections
import gc
import json
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import headrace.formats._npy as npy
import headrace.io._in_flight as in_flight
import headrace.io._open_files as open_files
import headrace.pipeline._locks as locks
import headrace.pipeline._mixture as mixture
import headrace.pipeline._shutdown as shutdown
import headrace.plan._permute as permute
from _fds import open_targets
from _scripts import run_benchmark
from headrace.formats import FileSource, PaddedRows, TableSource, TokenSource
from headrace.io._pool import _ALL as POOLS
from headrace.pipeline import Loader
from headrace.pipeline._prefetch import Prefetcher

B = 8


Opener = Callable[[], Any]


def _tokens(d: Path) -> Opener:
    rng = np.random.default_rng(0)
    for i in range(8):
        rng.integers(0, 50_000, 4096, dtype=np.uint16).tofile(d / f"shard-{i}.bin")
    return lambda: TokenSource(sorted(d.glob("*.bin")), context=64, dtype="uint16")


def _padded(d: Path) -> Opener:
    rows = np.random.default_rng(1).integers(0, 50_000, (512, 32), dtype=np.int32)
    np.save(d / "rows.npy", rows)
    return lambda: PaddedRows(d / "rows.npy", context=31, pad_id=9)


def _npy(d: Path) -> Opener:
    for i in range(16):
        np.save(d / f"s-{i:02d}.npy", np.full((4, 4), i, np.uint8))
    return lambda: FileSource(str(d), format="npy")


def _parquet(d: Path) -> Opener:
    import pyarrow as pa
    import pyarrow.parquet as pq

    for i in range(4):
        ids = pa.array([list(range(i, i + 1 + j % 30)) for j in range(64)], pa.list_(pa.int32()))
        pq.write_table(pa.table({"input_ids": ids}), d / f"{i}.parquet")
    return lambda: TableSource(str(d), columns=["input_ids"], width=32, truncate=True)


#: Each writes a tiny dataset into a folder and returns what opens a source over it.
KINDS: dict[str, Callable[[Path], Opener]] = {
    "tokens": _tokens,
    "padded": _padded,
    "npy": _npy,
    "parquet": _parquet,
}


def _threads() -> tuple[collections.Counter[str], dict[str, int]]:
    """Threads outside headrace's shared pools, by name; and each pool's thread count
    (a pool starts a thread when work finds none idle, up to its fixed size)."""
    others: collections.Counter[str] = collections.Counter()
    pooled = {p.name: 0 for p in POOLS}
    for t in threading.enumerate():
        pool = next((p for p in pooled if t.name.startswith(p)), None)
        if pool is None:
            others[t.name.rstrip("0123456789_-")] += 1
        else:
            pooled[pool] += 1
    return others, pooled


def _tables() -> dict[str, int]:
    return {
        "reads in flight": len(in_flight._READS),
        "locks": len(locks._LOCKS),
        "open loaders": len(shutdown._OPEN),
        "file holders": len(open_files._HOLDERS),
    }


# Process-wide caches bounded by their ``maxsize`` (the epochs' permutations, 256; the
# mixture's step keys, 4,096...): emptied at each mark, so that what fills them up to
# their bound is not counted as growth, and anything else is.
CACHES = [
    permute.cached_permutation,
    permute.cached_keys,
    mixture.source_seed,
    permute._retry_key,
    npy._literal,
]
RING = "anon_inode:[io_uring]"  # rings in use and idle ones: 8 kept idle (io/_uring.py)


def _read_ahead_at_rest() -> None:
    """Wait until each live read-ahead thread waits for room on its full queue: it then
    holds one chunk beyond the queue's, whatever the timing. (A mark taken while it reads
    held one chunk more or less: a padded run's 180 KB, read as growth when the later
    marks all met it, 249 KB over 6,000 steps in CI, 2026-12-07.)"""
    for p in [o for o in gc.get_objects() if isinstance(o, Prefetcher)]:
        deadline = time.monotonic() + 10
        while p.thread.is_alive() and time.monotonic() < deadline:
            frame = sys._current_frames().get(p.thread.ident or 0)
            if p.queue.full() and frame is not None and frame.f_code.co_name == "put":
                break
            time.sleep(0.001)
        else:
            assert not p.thread.is_alive(), "the read-ahead never came to rest"


def _mark() -> dict[str, Any]:
    _read_ahead_at_rest()
    for cache in CACHES:
        cache.cache_clear()
    gc.collect()
    others, pooled = _threads()
    return {
        "traced": tracemalloc.get_traced_memory()[0],
        "objects": len(gc.get_objects()),
        "fds": open_targets(),
        "threads": others,
        "pooled": pooled,
        "tables": _tables(),
    }


def _assert_flat(
    a: list[dict[str, Any]], b: list[dict[str, Any]], units: int, data: Path, *, nbytes: int
) -> None:
    """Marks ``b`` (``units`` steps or cycles after marks ``a``) hold what ``a`` held.

    Descriptors on the dataset's files (those being read at the time) and rings are
    bounded, the others the same. Bytes and objects: the least of each group of marks
    (a chunk of the read-ahead in flight at one mark is no growth), within ``nbytes``
    and 0.05 objects a unit. (NumPy keeps freed small blocks to reuse, up to a bound:
    ``tracemalloc`` counts them as held where they were first allocated, so the traced
    bytes of a healthy run still grow a little, less and less.)"""
    inside = f"{data}/"
    # Rings: what the first mark held (other tests in this process may have left idle
    # or parked rings) and this run's own, at most 16.
    rings = a[0]["fds"].get(RING, 0) + 16
    for m in (*a, *b):
        assert m["fds"].pop(RING, 0) <= rings
        files = [t for t in m["fds"] if t.startswith(inside)]
        assert sum(m["fds"].pop(t) for t in files) <= 64
        assert m["tables"].pop("reads in flight") <= 64  # the read-ahead's, at the time
        assert all(m["pooled"][p.name] <= p.threads for p in POOLS if p.name in m["pooled"])
    # Nothing more than the first held: other tests' sockets and threads in this worker
    # process may end meanwhile (two sockets did, once in CI, 2026-12-07).
    for key in ("fds", "threads"):
        assert not b[-1][key] - a[-1][key], key
    assert all(b[-1]["tables"][k] <= n for k, n in a[-1]["tables"].items()), "tables"
    grown = min(m["traced"] for m in b) - min(m["traced"] for m in a)
    assert grown < nbytes * units, f"{grown:,} bytes more over {units:,} (traced)"
    more = min(m["objects"] for m in b) - min(m["objects"] for m in a)
    # At least 50: 29 and 31 more objects over 100 healthy cycles, 1 run in 3 alone and
    # after other tests (2026-12-05; weakrefs, sets and bound methods a first stretch made
    # once, 56 of them in a new process). One object a cycle still fails, twice over.
    assert more < max(units // 20, 50), f"{more} objects more over {units:,}"


def _start_pool_threads() -> None:
    """Start every thread of the shared pools. A pool starts one when work finds none
    idle, so on a loaded machine a few more start between the marks than before them:
    4 threads' objects (locks, events, frames' cells), 128 objects over 100 cycles, read
    as growth (failed 2 runs in 3 alone while other jobs ran, 2026-12-06)."""
    for p in POOLS:
        started = threading.Barrier(p.threads + 1)
        waits = [p.get().submit(started.wait) for _ in range(p.threads)]
        started.wait()
        for w in waits:
            w.result()


@pytest.fixture
def traced() -> Iterator[None]:
    _start_pool_threads()
    tracemalloc.start()
    try:
        yield
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize(
    ("kind", "prefetch"),
    [("tokens", 4), ("tokens", 0), ("padded", 4), ("npy", 4), ("parquet", 4)],
)
def test_a_long_run_holds_what_its_first_steps_held(
    kind: str, prefetch: int, tmp_path: Path, traced: None
) -> None:
    # Epochs of 4 to 64 steps: 6,000 steps meet 90 to 1,500 of them.
    src = KINDS[kind](tmp_path)()
    marks: dict[int, dict[str, Any]] = {}
    with Loader(src, batch_size=B, seed=0, steps=7000, prefetch=prefetch) as ld:
        for step, _ in enumerate(ld, 1):
            if step in (500, 600, 700, 6500, 6600, 6700):
                marks[step] = _mark()
    before, after = [marks[s] for s in (500, 600, 700)], [marks[s] for s in (6500, 6600, 6700)]
    # 40 B a step: a leak of 60 B a step fails (360 KB); the fresh-clone CI saw a healthy
    # padded run at 23 B a step (139 KB), other tests' state in the same process.
    _assert_flat(before, after, 6000, tmp_path, nbytes=40)


@pytest.mark.parametrize("kind", ["tokens", "npy", "parquet"])
def test_open_use_close_cycles_hold_what_the_first_ones_held(
    kind: str, tmp_path: Path, traced: None
) -> None:
    # A notebook or a sweep: a source opened, read a few steps through a Loader and
    # closed, again and again in one process.
    make = KINDS[kind](tmp_path)
    marks: dict[int, dict[str, Any]] = {}
    for cycle in range(1, 131):
        src = make()
        with Loader(src, batch_size=B, seed=cycle % 7, steps=3) as ld:
            for _ in ld:
                pass
        src.close()
        del src, ld
        if cycle in (28, 29, 30, 128, 129, 130):
            marks[cycle] = _mark()
    before, after = [marks[c] for c in (28, 29, 30)], [marks[c] for c in (128, 129, 130)]
    # 2,000 bytes a cycle: the interpreter's own small blocks held after a cycle grow
    # until about cycle 400 and stay there (Parquet, 2026-12-07: +40 KB from cycle 30 to
    # 400, then flat to cycle 1,400, held by no object the collector sees; 103,591 bytes
    # from cycle 30 to 130 once in CI, against a bound of 1,000 a cycle).
    _assert_flat(before, after, 100, tmp_path, nbytes=2000)


def test_the_soak_script_reports_growth_and_refuses_an_unknown_scenario(tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    p = run_benchmark(
        "soak.py", "--scenarios", "npy-files-sync,cycles-tokens-shards", "--steps", "400",
        "--cycles", "30", "--files", "4", "--root", str(tmp_path / "data"), "--json", str(out),
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-2000:]
    rows = {r["scenario"]: r for r in json.loads(out.read_text())}
    assert set(rows) == {"npy-files-sync", "cycles-tokens-shards"}
    steps, cycles = rows["npy-files-sync"], rows["cycles-tokens-shards"]
    assert (steps["unit"], steps["per"], steps["steps_per_epoch"]) == ("steps", 10_000, 0.5)
    assert steps["epochs"] == steps["range"][1] * 2  # 4 files of a sample, 8 a step
    assert (cycles["unit"], cycles["per"]) == ("cycles", 100)
    for row in rows.values():
        assert row["first"]["fds"] == row["last"]["fds"]
        assert row["first"]["open_loaders"] == row["last"]["open_loaders"]
        assert "fds" not in row["growth"]  # only what changed has a slope
        assert len(row["sha256"]) == 16
    assert f"sha256 {steps['sha256']}" in p.stdout
    p = run_benchmark("soak.py", "--scenarios", "tokens")
    assert p.returncode == 2
    assert "unknown scenario 'tokens'; known: tokens-shards, padded," in p.stderr
