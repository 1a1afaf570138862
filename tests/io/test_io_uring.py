"""The io_uring engine: faults injected into completions, fallbacks, lifetimes.

Mocks appear only to inject faults: a completion's result rewritten (short
read, EIO, EOF), a syscall made to fail. Everything else reads real files
through a real ring.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import headrace.io._uring as uring
from headrace.errors import ConfigError, ReadEOFError, StorageError
from headrace.io import RangeReader, ReaderConfig
from headrace.io._uring import Ring, RingPool, ring_pool

SIZE = (1 << 20) + 100  # the last O_DIRECT block is short

needs_uring = pytest.mark.skipif(
    not ring_pool().available(), reason=f"io_uring unavailable: {ring_pool().reason}"
)


@pytest.fixture
def file(tmp_path: Path) -> tuple[str, np.ndarray]:
    data = np.random.default_rng(7).integers(0, 256, SIZE, dtype=np.uint8)
    p = tmp_path / "f.bin"
    p.write_bytes(data.tobytes())
    return str(p), data


@pytest.fixture
def pool(monkeypatch: pytest.MonkeyPatch):
    """A fresh, private ring pool (closed afterwards), so tests see its state alone."""
    fresh = RingPool()
    monkeypatch.setattr(uring, "_POOL", fresh)
    yield fresh
    fresh.close()


def far_ranges(n: int, length: int = 5000) -> list[tuple[int, int]]:
    # 100 KB apart: never coalesced, so every range is its own read.
    return [(i * 100_000 + 7, length) for i in range(n)]


def _fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


class Completions:
    """Rewrites completion results: ``rule(piece_offset, nth_completion, res) -> res``.

    Counts what was pushed to and reaped from the ring, to check that every
    submitted read completed before the engine returned or raised.
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch, rule: Callable[[int, int, int], int]):
        self.rule = rule
        self.pushed = 0
        self.reaped: list[tuple[int, int, int]] = []  # (piece offset, real res, given res)
        self.seen: Counter[int] = Counter()
        real_read, real_reap, real_push = Ring.read, Ring._reap, Ring._push

        def read(ring, fd, addr, off, length, **kw):
            self.off = off
            self.seen.clear()
            return real_read(ring, fd, addr, off, length, **kw)

        def reap(ring):
            ud, res = real_reap(ring)
            for j, u in enumerate(ud.tolist()):
                o, r = int(self.off[u]), int(res[j])
                res[j] = self.rule(o, self.seen[u], r)
                self.seen[u] += 1
                self.reaped.append((o, r, int(res[j])))
            return ud, res

        def push(ring, records):
            self.pushed += len(records)
            real_push(ring, records)

        monkeypatch.setattr(Ring, "read", read)
        monkeypatch.setattr(Ring, "_reap", reap)
        monkeypatch.setattr(Ring, "_push", push)


def reader(strategy: str, in_flight: int = 4, **kw) -> RangeReader:
    cfg = ReaderConfig(strategy=strategy, in_flight=in_flight, engine="uring", **kw)  # type: ignore[arg-type]
    return RangeReader(cfg)


@needs_uring
@pytest.mark.parametrize(
    ("strategy", "cut"),
    [("pread", 1000), ("odirect", 4096), ("odirect", 1000), ("odirect-serial", 1000)],
)
def test_short_completions_are_finished(file, monkeypatch, strategy, cut) -> None:
    """pread and aligned O_DIRECT resubmit the rest; unaligned O_DIRECT finishes buffered."""
    path, data = file
    comp = Completions(monkeypatch, lambda o, nth, res: min(res, cut) if nth == 0 else res)
    preads = []
    real_preadv = os.preadv

    def counting_preadv(fd, bufs, offset):
        preads.append(offset)
        return real_preadv(fd, bufs, offset)

    monkeypatch.setattr(os, "preadv", counting_preadv)
    ranges = [*far_ranges(5), (SIZE - 50, 50)]
    with reader(strategy) as r:
        got = r.read(path, ranges)
        assert r.stats.engine == "uring"
    assert [g.tobytes() for g in got] == [data[o : o + n].tobytes() for o, n in ranges]
    assert any(given < real for _, real, given in comp.reaped)  # the fault did land
    resubmitted = comp.pushed - len(ranges)
    if strategy.startswith("odirect") and cut == 1000:
        # O_DIRECT cannot resume at an unaligned offset: buffered tails instead.
        assert resubmitted == 0 and len(preads) == 5
    else:
        assert resubmitted == 5 and preads == []  # each 5000-byte range once more
    assert comp.pushed == len(comp.reaped)


@needs_uring
def test_a_piece_longer_than_one_read_takes_several(file, monkeypatch) -> None:
    path, data = file
    monkeypatch.setattr(uring, "MAX_READ", 64 * 1024)
    comp = Completions(monkeypatch, lambda o, nth, res: res)
    for strategy in ("pread", "odirect"):
        with reader(strategy) as r:
            (got,) = r.read(path, [(3, SIZE - 3)])  # one piece of 1 MiB (>= MIN_PIECE)
        assert np.array_equal(got, data[3:])
    assert comp.pushed == len(comp.reaped) > 2 * 16


@needs_uring
@pytest.mark.parametrize("strategy", ["pread", "odirect", "odirect-serial"])
def test_eio_on_one_read_of_many_waits_for_the_others(file, monkeypatch, pool, strategy) -> None:
    path, _ = file
    bad = 5 * 100_000 + 7  # the sixth range's first byte
    comp = Completions(monkeypatch, lambda o, nth, res: -errno.EIO if o <= bad < o + 8192 else res)
    with reader(strategy, in_flight=4) as r:
        with pytest.raises(StorageError) as ei:
            r.read(path, far_ranges(10))
    assert ei.value.errno == errno.EIO
    msg = str(ei.value)
    assert f"{path}: " in msg
    if strategy == "pread":
        assert "read of bytes [500007, 505007) failed after 0 bytes: Input/output error" in msg
    else:  # O_DIRECT names the aligned read it made
        assert "O_DIRECT read of bytes [499712, 507904) failed after 0 bytes" in msg
    assert isinstance(ei.value.__cause__, OSError)
    # Nothing was left in flight: every read pushed was reaped; the ring is clean and reusable.
    assert comp.pushed == len(comp.reaped) >= 6
    assert comp.pushed < 10  # after the failure no new read started
    assert pool.idle() == 1 and pool._idle[0]._pending() == 0


@needs_uring
def test_several_failures_raise_the_first_with_a_note(file, monkeypatch) -> None:
    path, _ = file
    Completions(monkeypatch, lambda o, nth, res: -errno.EIO)
    with reader("pread", in_flight=4) as r:
        with pytest.raises(StorageError, match=r"bytes \[7, 5007\) failed after 0 bytes") as ei:
            r.read(path, far_ranges(8))
    assert ei.value.__notes__ == ["3 other read(s) of the same batch also failed."]


@needs_uring
@pytest.mark.parametrize("strategy", ["pread", "odirect"])
def test_eof_and_truncation_errors_match_the_thread_engine(file, monkeypatch, strategy) -> None:
    path, _ = file
    messages = {}
    for engine in ("threads", "uring"):
        with RangeReader(ReaderConfig(strategy=strategy, engine=engine)) as r:  # type: ignore[arg-type]
            with pytest.raises(ReadEOFError) as past:
                r.read(path, [(0, 10), (SIZE - 10, 11)])
            r.read(path, [(0, 10)])
            os.truncate(path, 200_000)
            with pytest.raises(ReadEOFError) as shrunk:
                r.read(path, [(0, 10), (300_000, 1000), (400_000, 10)])
            messages[engine] = (str(past.value), str(shrunk.value))
        with open(path, "r+b") as fh:
            fh.truncate(SIZE)
    assert messages["threads"] == messages["uring"]
    assert "[300000, 301000) reached end of file" in messages["uring"][1]
    assert "file has 200000 bytes" in messages["uring"][1]


@needs_uring
def test_a_zero_byte_completion_is_end_of_file(file, monkeypatch) -> None:
    path, _ = file
    Completions(monkeypatch, lambda o, nth, res: 0 if o == 200_007 else res)
    with reader("pread") as r:
        with pytest.raises(ReadEOFError) as ei:
            r.read(path, far_ranges(4))
    assert str(ei.value) == (
        f"{path}: read of bytes [200007, 205007) reached end of file after 0 bytes "
        f"(file has {SIZE} bytes)"
    )


@pytest.mark.parametrize(
    ("err", "text"), [(errno.ENOSYS, "Function not implemented"), (errno.EPERM, "not permitted")]
)
def test_a_ring_that_cannot_be_set_up_falls_back_to_threads(
    file, monkeypatch, pool, err, text
) -> None:
    path, data = file
    calls = []

    def refuse(entries, params):
        calls.append(entries)
        raise OSError(err, os.strerror(err))

    monkeypatch.setattr(uring, "_sys_setup", refuse)
    with RangeReader(ReaderConfig(strategy="odirect")) as r:  # engine "auto"
        got = r.read(path, far_ranges(6))
        r.read(path, far_ranges(6))
        assert [g.tobytes() for g in got] == [data[o : o + n].tobytes() for o, n in far_ranges(6)]
        assert r.stats.reads_by_engine == {"threads": 2}
    assert calls == [uring.RING_ENTRIES]  # tried once: the verdict is kept
    assert text in pool.reason
    with RangeReader(ReaderConfig(strategy="pread", engine="uring")) as r:
        with pytest.raises(ConfigError, match=rf"io_uring is not available here \(.*{text}"):
            r.read(path, far_ranges(2))


@needs_uring
def test_a_kernel_without_op_read_falls_back(monkeypatch, pool) -> None:
    real = uring._sys_setup

    def old_kernel(entries, params):
        fd = real(entries, params)
        params.features = uring.IORING_FEAT_SINGLE_MMAP  # as Linux 5.4 answers
        return fd

    fds = _fd_count()
    monkeypatch.setattr(uring, "_sys_setup", old_kernel)
    assert pool.acquire() is None and "lacks IORING_OP_READ" in pool.reason
    assert _fd_count() == fds  # the refused ring's fd was closed


def test_other_machines_fall_back(monkeypatch, pool) -> None:
    # aarch64 has the same syscall numbers, but its weak memory ordering
    # needs barriers Python cannot issue (see _uring.py).
    monkeypatch.setattr(uring.platform, "machine", lambda: "aarch64")
    uring._syscall.cache_clear()
    try:
        assert pool.acquire() is None and "x86_64 only (this is aarch64" in pool.reason
    finally:
        monkeypatch.undo()
        uring._syscall.cache_clear()


@needs_uring
def test_env_turns_auto_off_and_bad_values_are_refused(file, monkeypatch) -> None:
    path, _ = file
    monkeypatch.setenv("HEADRACE_IO_URING", "0")
    with RangeReader("pread") as r:
        r.read(path, far_ranges(3))
        assert r.stats.engine == "threads"
    with reader("pread") as r:  # an explicit engine="uring" still gets io_uring
        r.read(path, far_ranges(3))
        assert r.stats.engine == "uring"
    monkeypatch.setenv("HEADRACE_IO_URING", "maybe")
    with RangeReader("pread") as r:
        with pytest.raises(
            ConfigError, match=r"HEADRACE_IO_URING must be 1, true, yes or on .* \(got .maybe.\)"
        ):
            r.read(path, far_ranges(3))
    with pytest.raises(ConfigError, match="Unknown read engine 'fast'"):
        ReaderConfig(engine="fast")  # type: ignore[arg-type]


@needs_uring
def test_a_wave_is_submitted_in_doubling_chunks(file, monkeypatch) -> None:
    path, data = file
    real = uring._sys_enter
    calls: list[tuple[int, int]] = []

    def record(fd, to_submit, min_complete, flags):
        calls.append((to_submit, min_complete))
        return real(fd, to_submit, min_complete, flags)

    monkeypatch.setattr(uring, "_sys_enter", record)
    with reader("pread", in_flight=8) as r:
        got = r.read(path, far_ranges(8))
    assert [g.tobytes() for g in got] == [data[o : o + n].tobytes() for o, n in far_ranges(8)]
    # The device gets the first read at once; the last call submits the rest and waits.
    assert calls[:4] == [(1, 0), (2, 0), (4, 0), (1, 1)]


@needs_uring
def test_enter_retries_transient_errors_and_a_failing_ring_is_retired(
    file, monkeypatch, pool
) -> None:
    path, data = file
    real = uring._sys_enter
    fds = _fd_count()
    calls: list[tuple[int, int]] = []
    inject: dict[int, int] = {1: errno.EINTR, 2: errno.EAGAIN, 3: errno.EBUSY}

    def flaky(fd, to_submit, min_complete, flags):
        calls.append((to_submit, min_complete))
        e = inject.get(len(calls))
        if e:
            raise OSError(e, os.strerror(e))
        return real(fd, to_submit, min_complete, flags)

    monkeypatch.setattr(uring, "_sys_enter", flaky)
    expect = [data[o : o + n].tobytes() for o, n in far_ranges(6)]
    with reader("pread", in_flight=4) as r:
        # EINTR, EAGAIN and EBUSY are retried; the SQEs stay queued meanwhile.
        assert [g.tobytes() for g in r.read(path, far_ranges(6))] == expect
        # EINTR retried the call; EAGAIN and EBUSY gave up on this chunk (nothing
        # submitted), so the doubling went on and the last call took all four.
        assert calls[:4] == [(1, 0), (1, 0), (2, 0), (4, 1)]
        assert pool.idle() == 1
        # Any other error retires the ring: it is closed, not pooled.
        parked = len(uring._PARKED)
        inject = {len(calls) + 3: errno.EINVAL}  # after the first reads are submitted
        with pytest.raises(
            StorageError, match=r"f\.bin: io_uring failed during a batch of 6 reads"
        ):
            r.read(path, far_ranges(6))
        assert pool.idle() == 0
        # Reads it took may still be landing in the buffer: kept alive, never freed.
        assert len(uring._PARKED) == parked + 1
        assert [g.tobytes() for g in r.read(path, far_ranges(6))] == expect  # a new ring
    pool.close()
    assert _fd_count() == fds
    del uring._PARKED[parked:]


@needs_uring
def test_a_kernel_refusing_a_waiting_enter_is_backed_off_not_spun(file, monkeypatch, pool) -> None:
    # EAGAIN on a call that must wait, with nothing completed to reap: retried after a
    # growing pause (not in a tight loop), and the batch still completes.
    path, data = file
    real = uring._sys_enter
    refusals = 5
    naps: list[float] = []

    def busy(fd, to_submit, min_complete, flags):
        nonlocal refusals
        if min_complete and refusals:
            refusals -= 1
            raise OSError(errno.EAGAIN, os.strerror(errno.EAGAIN))
        return real(fd, to_submit, min_complete, flags)

    monkeypatch.setattr(uring, "_sys_enter", busy)
    monkeypatch.setattr(uring.time, "sleep", naps.append)
    with reader("pread", in_flight=4) as r:
        got = r.read(path, far_ranges(1) * 2)
    assert [g.tobytes() for g in got] == [data[o : o + n].tobytes() for o, n in far_ranges(1)] * 2
    assert len(naps) >= 1 and naps == sorted(naps) and all(0 < t <= 0.01 for t in naps)


@needs_uring
def test_interrupt_mid_batch_waits_for_reads_in_flight(file, monkeypatch, pool) -> None:
    path, data = file
    real_reap = Ring._reap
    state = {"reaps": 0}

    def interrupted(ring):
        state["reaps"] += 1
        if state["reaps"] == 2:
            raise KeyboardInterrupt  # as a Ctrl-C landing between two waves
        return real_reap(ring)

    monkeypatch.setattr(Ring, "_reap", interrupted)
    with reader("odirect", in_flight=8) as r:
        with pytest.raises(KeyboardInterrupt):
            r.read(path, far_ranges(10))
        (ring,) = pool._idle
        assert ring._pending() == 0  # drained before the interrupt went on
        got = r.read(path, far_ranges(10))
    assert [g.tobytes() for g in got] == [data[o : o + n].tobytes() for o, n in far_ranges(10)]


def _interrupt_then(monkeypatch, in_drain) -> None:
    """A Ctrl-C at the second reap; then, draining, ``in_drain(ring)`` instead of the
    first wait (the drain made to wait: its reads are told not ready once)."""
    real_reap, real_ready, real_wait = Ring._reap, Ring._ready, Ring._enter_wait
    state = {"reaps": 0, "draining": False, "told": False}

    def reap(ring):
        state["reaps"] += 1
        if state["reaps"] == 2:
            state["draining"] = True
            raise KeyboardInterrupt
        return real_reap(ring)

    def ready(ring):
        if state["draining"] and not state["told"]:
            state["told"] = True
            return 0
        return real_ready(ring)

    def wait(ring):
        if state["draining"] and state["told"] and not state.get("done"):
            state["done"] = True
            in_drain(ring)
        return real_wait(ring)

    monkeypatch.setattr(Ring, "_reap", reap)
    monkeypatch.setattr(Ring, "_ready", ready)
    monkeypatch.setattr(Ring, "_enter_wait", wait)


@needs_uring
def test_a_second_interrupt_while_draining_still_waits_for_every_read(
    file, monkeypatch, pool
) -> None:
    path, data = file

    def again(ring):
        raise KeyboardInterrupt("the second Ctrl-C")

    _interrupt_then(monkeypatch, again)
    with reader("odirect", in_flight=8) as r:
        with pytest.raises(KeyboardInterrupt, match="the second Ctrl-C"):
            r.read(path, far_ranges(10))
        (ring,) = pool._idle  # drained, then given back
        assert ring._pending() == 0 and not ring.broken
        got = r.read(path, far_ranges(10))
    assert [g.tobytes() for g in got] == [data[o : o + n].tobytes() for o, n in far_ranges(10)]


@needs_uring
def test_a_ring_that_breaks_while_draining_parks_the_buffers(file, monkeypatch, pool) -> None:
    # The device may still write into the batch's buffers: they are kept (parked) for
    # the life of the process rather than freed under it, and the ring is retired.
    path, data = file
    parked = list(uring._PARKED)
    methods = {name: getattr(Ring, name) for name in ("_reap", "_ready", "_enter_wait")}

    def breaks(ring):
        ring.broken = True
        raise OSError(errno.EIO, "Input/output error")

    _interrupt_then(monkeypatch, breaks)
    with reader("odirect", in_flight=8) as r:
        with pytest.raises(KeyboardInterrupt):
            r.read(path, far_ranges(10))
        assert len(uring._PARKED) == len(parked) + 1
        assert pool._idle == []  # the broken ring is not lent again
        for name, method in methods.items():
            monkeypatch.setattr(Ring, name, method)
        got = r.read(path, far_ranges(10))  # on a new ring
        assert len(pool._idle) == 1
    assert [g.tobytes() for g in got] == [data[o : o + n].tobytes() for o, n in far_ranges(10)]
    uring._PARKED[:] = parked


@needs_uring
def test_threads_share_the_pool(file, pool) -> None:
    path, data = file
    errors: list[BaseException] = []
    barrier = threading.Barrier(6)

    def work(k: int) -> None:
        rng = np.random.default_rng(k)
        try:
            barrier.wait()
            for _ in range(20):
                rows = rng.integers(0, SIZE // 4096, 40)
                got = r.read_rows(path, rows, 4096)
                assert np.array_equal(got, data[: SIZE // 4096 * 4096].reshape(-1, 4096)[rows])
        except BaseException as exc:
            errors.append(exc)

    with reader("odirect", in_flight=16) as r:
        threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []
    assert 1 <= pool.idle() <= 6


# Python 3.12+ warns at os.fork() in a process with threads (these scripts fork on purpose
# while the I/O pool's threads live): that warning is Python's, not the one looked for.
QUIET_FORK = (
    "import warnings; warnings.filterwarnings("
    "'ignore', 'This process .* is multi-threaded', DeprecationWarning)\n"
)

FORK_AND_EXIT = (
    QUIET_FORK
    + """
import os, sys
import numpy as np
from headrace.io import RangeReader, ReaderConfig
path = sys.argv[1]
data = np.fromfile(path, dtype=np.uint8)
ranges = [(i * 100_000 + 7, 5000) for i in range(8)]

def check():
    with RangeReader(ReaderConfig(strategy="odirect", engine="uring")) as r:
        got = r.read(path, ranges)
        assert r.stats.engine == "uring"
    assert all(g.tobytes() == data[o : o + n].tobytes() for g, (o, n) in zip(got, ranges))

check()
pid = os.fork()
if pid == 0:
    try:
        check()  # the child's own ring, not the parent's
    except BaseException:
        os._exit(1)
    os._exit(0)
_, status = os.waitpid(pid, 0)
check()  # the parent's ring is untouched by the child
print("child", os.waitstatus_to_exitcode(status))
"""
)


def _python(*args: str) -> tuple[int, str, str]:
    """A child interpreter's exit status, stdout and stderr; it imports what this one does."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, env=env, timeout=60, check=False
    )
    return proc.returncode, proc.stdout, proc.stderr


@needs_uring
def test_fork_and_interpreter_exit(file) -> None:
    path, _ = file
    # Rings are closed at exit: no traceback, no ResourceWarning.
    assert _python("-X", "dev", "-c", FORK_AND_EXIT, path) == (0, "child 0\n", "")


@needs_uring
def test_a_short_read_beside_a_failure_is_finished_not_called_end_of_file(
    file, monkeypatch
) -> None:
    """A read already started finishes after another fails, as on threads: EIO is raised."""
    path, _ = file
    short, bad = 7, 100_007  # the first range comes back short; the second fails

    def rule(o: int, nth: int, res: int) -> int:
        if o == bad:
            return -errno.EIO
        return min(res, 1000) if o == short and nth == 0 else res

    comp = Completions(monkeypatch, rule)
    with reader("pread", in_flight=4) as r:
        with pytest.raises(StorageError) as ei:
            r.read(path, far_ranges(4))
    assert (short, 5000, 1000) in comp.reaped  # the short read did land
    assert not isinstance(ei.value, ReadEOFError)
    assert ei.value.errno == errno.EIO
    assert "read of bytes [100007, 105007) failed after 0 bytes: Input/output error" in str(
        ei.value
    )
    assert comp.pushed == len(comp.reaped)


FORK_WHILE_LOCKED = (
    QUIET_FORK
    + """
import os, signal, sys, threading
from headrace.io import RangeReader, ReaderConfig
from headrace.io._uring import ring_pool
path = sys.argv[1]

def check():
    with RangeReader(ReaderConfig(strategy="pread", engine="uring", in_flight=4)) as r:
        r.read(path, [(i * 100_000 + 7, 5000) for i in range(8)])
        assert r.stats.engine == "uring"

check()
held, done = threading.Event(), threading.Event()

def inside_the_pool():  # as a thread in acquire() or release() at the moment of the fork
    with ring_pool()._lock:
        held.set()
        done.wait()

t = threading.Thread(target=inside_the_pool)
t.start()
held.wait()
pid = os.fork()
if pid == 0:
    signal.alarm(5)  # a child stuck on the parent's lock dies of SIGALRM
    try:
        check()
    except BaseException:
        os._exit(1)
    os._exit(0)
done.set()
t.join()
_, status = os.waitpid(pid, 0)
print("child", os.waitstatus_to_exitcode(status))
"""
)


@needs_uring
def test_a_child_forked_while_a_thread_holds_the_pool_lock_can_read(file) -> None:
    path, _ = file
    assert _python("-c", FORK_WHILE_LOCKED, path) == (0, "child 0\n", "")


@needs_uring
def test_a_ring_refused_after_others_worked_names_the_cause(file, monkeypatch, pool) -> None:
    path, data = file
    real = uring._sys_setup
    made: list[int] = []

    def second_fails(entries, params):
        if made:
            raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))
        made.append(entries)
        return real(entries, params)

    monkeypatch.setattr(uring, "_sys_setup", second_fails)
    busy = pool.acquire()  # another thread's batch holds the only ring
    assert busy is not None
    try:
        with reader("pread") as r:
            with pytest.raises(
                ConfigError, match=r"not available here \(io_uring_setup failed: Too many open"
            ):
                r.read(path, far_ranges(3))
        with RangeReader(ReaderConfig(strategy="pread", in_flight=4)) as r:  # auto: threads
            got = r.read(path, far_ranges(3))
            assert r.stats.engine == "threads"
        assert [g.tobytes() for g in got] == [data[o : o + n].tobytes() for o, n in far_ranges(3)]
        assert pool.reason == ""  # io_uring works here: a later batch tries again
    finally:
        pool.release(busy)
