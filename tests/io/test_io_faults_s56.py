"""Fault paths found walking every read strategy on a local disk (session 56).

Mocks only inject the fault: a completion's result rewritten. Everything else
reads real files through a real ring.
"""

from __future__ import annotations

import errno
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from headrace.errors import StorageError
from headrace.io import RangeReader, ReaderConfig
from headrace.io._uring import Ring, ring_pool

SIZE = (1 << 20) + 100  # the last O_DIRECT block is short

needs_uring = pytest.mark.skipif(
    not ring_pool().available(), reason=f"io_uring unavailable: {ring_pool().reason}"
)


@pytest.fixture
def file(tmp_path: Path) -> tuple[str, np.ndarray]:
    data = np.random.default_rng(56).integers(0, 256, SIZE, dtype=np.uint8)
    p = tmp_path / "f.bin"
    p.write_bytes(data.tobytes())
    return str(p), data


def far_ranges(n: int, length: int = 5000) -> list[tuple[int, int]]:
    # 100 KB apart: never coalesced, so every range is its own read.
    return [(i * 100_000 + 7, length) for i in range(n)]


def rewrite_completions(monkeypatch: pytest.MonkeyPatch, rule) -> list[tuple[int, int, int]]:
    """Rewrite each completion's result: ``rule(piece_offset, nth, res) -> res``;
    returns the (offset, real res, given res) of every completion reaped."""
    reaped: list[tuple[int, int, int]] = []
    seen: Counter[int] = Counter()
    real_read, real_reap = Ring.read, Ring._reap
    offs: list[np.ndarray] = []

    def read(ring, fd, addr, off, length, **kw):
        offs[:] = [off]
        seen.clear()
        return real_read(ring, fd, addr, off, length, **kw)

    def reap(ring):
        ud, res = real_reap(ring)
        for j, u in enumerate(ud.tolist()):
            o, r = int(offs[0][u]), int(res[j])
            res[j] = rule(o, seen[u], r)
            seen[u] += 1
            reaped.append((o, r, int(res[j])))
        return ud, res

    monkeypatch.setattr(Ring, "read", read)
    monkeypatch.setattr(Ring, "_reap", reap)
    return reaped


@needs_uring
@pytest.mark.parametrize("strategy", ["pread", "odirect", "odirect-serial"])
def test_an_interrupted_or_refused_completion_is_read_again(file, monkeypatch, strategy) -> None:
    """-EINTR and -EAGAIN in a completion are transient (the thread engine's os.preadv
    retries EINTR itself): the read is submitted again, not failed. Until 2026-12-07
    the io_uring engine raised them, where the thread engine read the same bytes."""
    path, data = file

    def rule(o: int, nth: int, res: int) -> int:
        if nth == 0 and o <= 200_007 < o + 8192:
            return -errno.EINTR
        if nth < 3 and o <= 400_007 < o + 8192:
            return -errno.EAGAIN
        return res

    reaped = rewrite_completions(monkeypatch, rule)
    ranges = far_ranges(6)
    cfg = ReaderConfig(strategy=strategy, engine="uring", in_flight=4)  # type: ignore[arg-type]
    with RangeReader(cfg) as r:
        got = r.read(path, ranges)
        assert r.stats.engine == "uring"
    assert [g.tobytes() for g in got] == [data[o : o + n].tobytes() for o, n in ranges]
    assert sum(given < 0 for _, _, given in reaped) == 4  # every fault landed


@needs_uring
@pytest.mark.parametrize("code", [errno.EINTR, errno.EAGAIN])
def test_a_completion_refused_every_time_is_an_error_naming_the_range(
    file, monkeypatch, code
) -> None:
    """Retried a bounded number of times, then raised: never a hang."""
    path, _ = file
    reaped = rewrite_completions(monkeypatch, lambda o, nth, res: -code if o == 100_007 else res)
    cfg = ReaderConfig(strategy="pread", engine="uring", in_flight=4)
    with RangeReader(cfg) as r:
        with pytest.raises(StorageError) as ei:
            r.read(path, far_ranges(4))
        assert r.read(path, [(7, 10)])[0].size == 10  # the ring is still usable
    assert ei.value.errno == code
    msg = str(ei.value) + " ".join(getattr(ei.value, "__notes__", []))
    assert f"{path}: read of bytes [100007, 105007) failed after 0 bytes" in msg
    assert "engine='threads'" in msg  # what to do
    tries = sum(o == 100_007 for o, _, _ in reaped)
    assert 1 < tries <= 10


def test_a_ctrl_c_while_a_pool_starts_a_thread_keeps_the_pool_in_its_bound(monkeypatch) -> None:
    """Thread.start waits for the new thread to run: a Ctrl-C landing there left a
    running thread the pool did not count, so every such interrupt started one more
    than ``max_workers`` (7 threads in a pool of 8 that had counted 2, after 15 Ctrl-Cs
    in batches of reads), and shutdown did not join them."""
    import threading

    from headrace.io._daemon_pool import DaemonPool

    real_start = threading.Thread.start

    def interrupted_start(self: threading.Thread) -> None:
        real_start(self)
        if self.name.startswith("s56-pool"):
            raise KeyboardInterrupt  # as if Ctrl-C landed in the wait for the thread

    monkeypatch.setattr(threading.Thread, "start", interrupted_start)
    pool = DaemonPool(2, "s56-pool")
    gate = threading.Event()
    for _ in range(5):
        try:
            pool.submit(gate.wait, 5)
        except KeyboardInterrupt:
            pass
    monkeypatch.setattr(threading.Thread, "start", real_start)
    mine = [t for t in threading.enumerate() if t.name.startswith("s56-pool")]
    assert len(mine) <= 2
    gate.set()
    pool.shutdown(wait=True)
    assert not [t for t in threading.enumerate() if t.name.startswith("s56-pool")]


def test_a_ctrl_c_while_submitting_a_batchs_loops_waits_for_the_loops_started() -> None:
    """run_batch's promise, nothing left running on return, held for failures of reads
    but not for a Ctrl-C out of ``pool.submit``: the loops submitted before it read on
    through the whole batch after the caller had gone (through a file it had unpinned,
    which the reader could close and its descriptor number be reused)."""
    import threading
    from concurrent.futures import Executor, Future

    from headrace.io._batch import run_batch
    from headrace.io._daemon_pool import DaemonPool

    in_read, release = threading.Event(), threading.Event()
    lock = threading.Lock()
    counts = {"running": 0, "started": 0}

    def read(i: int) -> None:
        with lock:
            counts["running"] += 1
            counts["started"] += 1
        try:
            if threading.current_thread() is not threading.main_thread():
                in_read.set()
                release.wait(2)
        finally:
            with lock:
                counts["running"] -= 1

    real = DaemonPool(4, "s56-batch")

    class InterruptedPool(Executor):
        submits = 0

        def submit(self, fn, /, *args, **kwargs) -> Future:  # type: ignore[no-untyped-def, override]
            self.submits += 1
            future = real.submit(fn, *args, **kwargs)
            if self.submits == 2:
                # Queued, then the Ctrl-C lands in Thread.start's wait: no future returned.
                for _ in range(1000):  # both loops reading (10 s at most)
                    if counts["running"] >= 2:
                        break
                    in_read.wait(0.01)
                raise KeyboardInterrupt
            return future

    with pytest.raises(KeyboardInterrupt):
        run_batch(1000, read, depth=4, pool=InterruptedPool())
    running, started = counts["running"], counts["started"]
    release.set()
    real.shutdown(wait=True)
    assert running == 0  # both loops started were waited for, the one without a future too
    assert started == 2  # and started no read after the Ctrl-C


@pytest.mark.parametrize("engine", ["threads", "uring"])
@pytest.mark.parametrize("strategy", ["mmap", "pread", "odirect", "odirect-serial", "adaptive"])
@pytest.mark.parametrize("size", [1, 4095, 4097, 3 * 65536 + 1])
def test_odd_sizes_read_as_numpy_reads_them(tmp_path: Path, strategy, engine, size) -> None:
    """A 1-byte file, sizes off the 4096-byte O_DIRECT block, ranges ending at EOF,
    duplicates, overlaps and ranges either side of the coalescing limits."""
    if engine == "uring" and not ring_pool().available():
        pytest.skip(f"io_uring unavailable: {ring_pool().reason}")
    p = tmp_path / "odd.bin"
    np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8).tofile(p)
    want = np.fromfile(p, dtype=np.uint8)
    ranges = [(0, size), (size - 1, 1), (size - 1, 1), (size, 0), (0, 1)]
    if size > 4096:
        ranges += [(1, 4096), (4095, 2), (size - 4097, 4097), (3, 10), (5, 10)]
    if size > 65536:
        ranges += [(100, 10), (110 + 65536, 10), (130 + 2 * 65536 + 1, 10)]
    cfg = ReaderConfig(strategy=strategy, engine=engine, max_span=8192)  # type: ignore[arg-type]
    with RangeReader(cfg) as r:
        got = r.read(str(p), ranges)
        rows = r.read_rows(str(p), np.array([0, size - 1, 0]), 1)
    assert [g.tobytes() for g in got] == [want[o : o + n].tobytes() for o, n in ranges]
    assert rows.tobytes() == want[[0, size - 1, 0]].tobytes()


@needs_uring
def test_a_ctrl_c_just_after_a_ring_is_taken_gives_it_back(file, monkeypatch) -> None:
    """A ring is a descriptor and three maps, never closed by the collector: one taken
    from the pool and dropped by a Ctrl-C before the read's ``try`` was lost for good."""
    import os

    from headrace.io import _reader

    path, _ = file
    pool = ring_pool()
    with RangeReader(ReaderConfig(strategy="pread", engine="uring")) as r:
        r.read(path, far_ranges(2))  # a ring made, used and given back
        idle, fds = pool.idle(), len(os.listdir("/proc/self/fd"))
        real_depth = _reader.ReaderConfig.depth

        def interrupted(self, *, ring: bool = False) -> int:
            if ring:
                raise KeyboardInterrupt  # as if Ctrl-C landed here
            return real_depth(self, ring=ring)

        monkeypatch.setattr(_reader.ReaderConfig, "depth", interrupted)
        with pytest.raises(KeyboardInterrupt):
            r.read(path, far_ranges(2))
        monkeypatch.setattr(_reader.ReaderConfig, "depth", real_depth)
        assert pool.idle() == idle
        assert len(os.listdir("/proc/self/fd")) == fds
