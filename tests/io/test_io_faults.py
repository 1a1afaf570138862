"""Fault injection: short reads, EIO in a batch, EOF, truncation while open, leaks.

The tests that mock ``os.preadv`` pin the thread engine; their io_uring
counterparts (faults injected into completions) are in test_io_uring.py.
"""

from __future__ import annotations

import errno
import gc
import os
import subprocess
import sys
import threading
import time
import tracemalloc
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import headrace
from _fds import open_targets
from headrace.errors import ReadEOFError, StorageError
from headrace.io import (
    ENGINES,
    STRATEGIES,
    LocalFile,
    RangeReader,
    ReaderConfig,
    deep_io_pool,
    deep_io_threads,
    io_pool,
    io_threads,
)
from headrace.io._batch import run_batch
from headrace.io._uring import ring_pool

SIZE = 1 << 20
POSITIONAL = ["pread", "odirect", "odirect-serial"]


@pytest.fixture
def file(tmp_path: Path) -> tuple[str, np.ndarray]:
    data = np.random.default_rng(5).integers(0, 256, SIZE + 100, dtype=np.uint8)
    p = tmp_path / "f.bin"
    p.write_bytes(data.tobytes())
    return str(p), data


def far_ranges(n: int, length: int = 3000) -> list[tuple[int, int]]:
    # 100 KiB apart: never coalesced, so every range is its own read.
    return [(i * 100_000 + 7, length) for i in range(n)]


@pytest.mark.parametrize("strategy", POSITIONAL)
def test_short_reads_are_completed(file, strategy, monkeypatch) -> None:
    path, data = file
    real = os.preadv
    calls = []

    def short(fd, bufs, offset):
        (buf,) = bufs
        mv = memoryview(buf)
        direct = os.get_blocking(fd) and (os.fstat(fd) and _is_direct(fd))
        # Buffered: hand back at most 1000 bytes. O_DIRECT: the kernel fills
        # the aligned buffer but we report an unaligned 1000 bytes, the case
        # the engine must finish with a buffered read.
        n = real(fd, [mv] if direct else [mv[:1000]], offset)
        calls.append(n)
        return min(n, 1000)

    monkeypatch.setattr(os, "preadv", short)
    ranges = [*far_ranges(5, 5000), (SIZE + 100 - 50, 50)]
    with RangeReader(ReaderConfig(strategy=strategy, in_flight=3, engine="threads")) as r:
        got = r.read(path, ranges)
    assert [g.tobytes() for g in got] == [data[o : o + n].tobytes() for o, n in ranges]
    assert len(calls) > len(ranges)


def _is_direct(fd: int) -> bool:
    import fcntl

    return bool(fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT)


@pytest.mark.parametrize("strategy", POSITIONAL)
def test_eio_on_one_range_waits_for_all_others(file, strategy, monkeypatch) -> None:
    path, _ = file
    real = os.preadv
    bad = 5 * 100_000 + 7  # the sixth range's first byte
    lock = threading.Lock()
    running = {"now": 0, "started": 0, "finished": 0}

    def flaky(fd, bufs, offset):
        with lock:
            running["now"] += 1
            running["started"] += 1
        try:
            time.sleep(0.02)  # keep the others in flight when the failure lands
            if offset <= bad < offset + memoryview(bufs[0]).nbytes:
                raise OSError(errno.EIO, "Input/output error")
            return real(fd, bufs, offset)
        finally:
            with lock:
                running["now"] -= 1
                running["finished"] += 1

    monkeypatch.setattr(os, "preadv", flaky)
    with RangeReader(ReaderConfig(strategy=strategy, in_flight=4, engine="threads")) as r:
        with pytest.raises(StorageError) as ei:
            r.read(path, far_ranges(10))
        # Nothing is still running when the error surfaces.
        assert running["now"] == 0 and running["started"] == running["finished"]
    assert ei.value.errno == errno.EIO
    assert path in str(ei.value) and "read of bytes [" in str(ei.value)
    if strategy != "odirect-serial":
        assert running["started"] > 1  # others were in flight


def test_several_failures_raise_the_first_with_a_note(file, monkeypatch) -> None:
    path, _ = file

    barrier = threading.Barrier(4, timeout=10)

    def fail(fd, bufs, offset):
        barrier.wait()  # four reads in flight, then all fail
        raise OSError(errno.EIO, f"boom at {offset}")

    monkeypatch.setattr(os, "preadv", fail)
    with RangeReader(ReaderConfig(strategy="pread", in_flight=4, engine="threads")) as r:
        with pytest.raises(StorageError, match=r"bytes \[7, 3007\)") as ei:
            r.read(path, far_ranges(8))
    notes = getattr(ei.value, "__notes__", [])
    assert notes == ["3 other read(s) of the same batch also failed."]


def test_run_batch_cancels_unstarted_loops_and_orders_errors() -> None:
    done: list[int] = []

    def read(i: int) -> None:
        if i in (3, 1):
            raise ValueError(i)
        done.append(i)

    with ThreadPoolExecutor(2) as pool:
        with pytest.raises(ValueError) as ei:
            run_batch(10, read, depth=2, pool=pool)
        assert ei.value.args[0] in (1, 3)
        # A saturated pool: queued loops are cancelled, the caller does the work.
        gate = threading.Event()
        blockers = [pool.submit(gate.wait) for _ in range(2)]
        seen: list[int] = []
        run_batch(6, seen.append, depth=3, pool=pool)
        assert sorted(seen) == list(range(6))
        gate.set()
        for b in blockers:
            b.result()
    seen = []
    run_batch(3, seen.append, depth=8, pool=None)
    assert seen == [0, 1, 2]
    run_batch(0, seen.append, depth=8, pool=None)


@pytest.mark.parametrize("engine", ["threads", "uring"])
@pytest.mark.parametrize("strategy", POSITIONAL)
def test_truncated_while_open_positional(file, strategy, engine) -> None:
    # The reader checks the size it saw at open, so the shrink is met by the
    # read itself (0 bytes back): both engines must say the same thing.
    path, _ = file
    if engine == "uring" and not ring_pool().available():
        pytest.skip(f"io_uring unavailable: {ring_pool().reason}")
    with RangeReader(ReaderConfig(strategy=strategy, engine=engine)) as r:  # type: ignore[arg-type]
        r.read(path, [(0, 10)])
        os.truncate(path, 200_000)
        with pytest.raises(ReadEOFError, match=r"\[300000, 301000\).*file has 200000 bytes"):
            r.read(path, [(0, 10), (300_000, 1000)])
        assert r.read(path, [(0, 10)])[0].size == 10
        assert r.stats.reads_by_engine == {engine: 2}  # the failed read is not counted


TRUNCATE_SCRIPT = """
import os, sys
from headrace.io import RangeReader
from headrace.errors import ReadEOFError
path = sys.argv[1]
with open(path, "wb") as fh:
    fh.write(os.urandom(1 << 20))
for strategy in ("mmap", "adaptive"):
    with RangeReader(strategy) as r:
        r.read(path, [(0, 10), (900_000, 10)])  # maps the whole file
        os.truncate(path, 4096)
        try:
            r.read(path, [(0, 10), (900_000, 100)])
        except ReadEOFError as exc:
            print("REFUSED", strategy, exc)
        else:
            print("READ", strategy)
        r.read_rows(path, [0, 1], 100)  # still fine below the new end
    with open(path, "wb") as fh:
        fh.write(os.urandom(1 << 20))
"""


def test_truncated_while_mapped_is_an_error_not_sigbus(tmp_path: Path) -> None:
    # A subprocess: if the guard failed, SIGBUS would kill it, not pytest.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run(
        [sys.executable, "-c", TRUNCATE_SCRIPT, str(tmp_path / "t.bin")],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, (proc.returncode, proc.stderr)
    lines = proc.stdout.splitlines()
    assert [ln.split()[:2] for ln in lines] == [["REFUSED", "mmap"], ["REFUSED", "adaptive"]]
    assert "shrank" in lines[0] and "4096 bytes" in lines[0]


def _map_count() -> int:
    with open("/proc/self/maps") as f:
        return sum(1 for _ in f)


def test_no_thread_buffer_or_handle_leak(file) -> None:
    path, _ = file
    # Start every pool thread first: pools start threads lazily, which is growth, not a leak.
    for pool, n in ((io_pool(), io_threads()), (deep_io_pool(), deep_io_threads())):
        barrier = threading.Barrier(n + 1)
        futures = [pool.submit(barrier.wait) for _ in range(n)]
        barrier.wait()
        for f in futures:
            f.result()
    ring_pool().available()  # likewise the first ring, which stays in the pool
    rng = np.random.default_rng(0)
    engines = [e for e in ENGINES if e != "uring" or ring_pool().available()]

    def cycles(start: int, stop: int) -> None:
        for i in range(start, stop):
            strategy = STRATEGIES[i % len(STRATEGIES)]
            engine = engines[i // len(STRATEGIES) % len(engines)]
            cfg = ReaderConfig(strategy=strategy, in_flight=16, engine=engine)  # type: ignore[arg-type]
            with RangeReader(cfg) as r:
                rows = rng.integers(0, SIZE // 512, 16)
                r.read_rows(path, rows, 512)
                r.read(path, far_ranges(3, 100))

    # Buffers: NumPy's are traced by tracemalloc, aligned O_DIRECT ones are mappings.
    # Every strategy and engine runs once before counting (pools keep what they made).
    tracemalloc.start()
    try:
        cycles(0, 2 * len(STRATEGIES) * len(engines))
        gc.collect()
        threads, fds, maps = threading.active_count(), open_targets(), _map_count()
        before = tracemalloc.take_snapshot()
        cycles(2 * len(STRATEGIES) * len(engines), 1000)
        gc.collect()
        after = tracemalloc.take_snapshot()
        # Only what headrace's own code allocated: tracemalloc sees every thread, and a
        # server another test left running (moto, a proxy) allocates meanwhile (1.96 MB
        # seen after the S3 tests). A leaked buffer is traced to the headrace line that made it.
        ours = [tracemalloc.Filter(True, str(Path(headrace.__file__).parent / "*"))]
        grown = sum(
            d.size_diff
            for d in after.filter_traces(ours).compare_to(before.filter_traces(ours), "filename")
        )
    finally:
        tracemalloc.stop()
    # Growth is a leak; a fall is another test's thread or mapping let go meanwhile
    # (the counts fell under a full run: 1829 -> 1735 mappings).
    assert threading.active_count() <= threads
    # Opened and not closed: a descriptor closed meanwhile (another test's object
    # collected, a server's connection) is not a leak, and made a bare count flaky.
    assert not open_targets() - fds, open_targets() - fds
    # A thread of a server another test left running may map a malloc arena meanwhile
    # (787 -> 788 after the S3 tests, before any change here); a mapping leaked a cycle
    # would add ~1,000.
    assert _map_count() <= maps + 8
    assert grown < 64 * 1024, grown  # one 16-row read is 8 KiB; 1,000 leaked would be 8 MB


def test_open_that_fails_after_open_closes_its_descriptor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(b"x" * 100)

    def broken_fstat(fd: int) -> os.stat_result:
        raise OSError(errno.EIO, "Input/output error")

    before = open_targets()
    monkeypatch.setattr(os, "fstat", broken_fstat)
    with pytest.raises(StorageError, match=r"f\.bin: cannot open \(Input/output error\)"):
        LocalFile(path)
    monkeypatch.undo()
    assert not open_targets() - before


def test_a_local_file_dropped_without_close_releases_its_descriptors(file) -> None:
    # A source or loader a user never closes (a `for` loop left by `break`, an
    # exception, a loader made per epoch) is dropped, not closed: its files must go too.
    path, _ = file
    before = open_targets()
    for _ in range(20):
        f = LocalFile(path)
        f.pread(0, 16)
        f.mapped  # noqa: B018  # the map as well
        del f
    gc.collect()
    assert not open_targets() - before


def test_a_failed_open_never_closes_another_files_descriptor(tmp_path: Path) -> None:
    # The descriptor a failed LocalFile opened and closed may be reused at once; its
    # finaliser must not close it again under the new owner.
    (tmp_path / "d").mkdir()
    other = tmp_path / "other.bin"
    other.write_bytes(b"y" * 10)
    try:
        LocalFile(tmp_path / "d")  # opens, then refuses a directory and closes
    except StorageError as exc:
        failed = exc  # its traceback keeps the half-made LocalFile alive
    fd = os.open(other, os.O_RDONLY)  # likely the number the failed open had
    try:
        del failed
        gc.collect()
        assert os.pread(fd, 10, 0) == b"y" * 10
    finally:
        os.close(fd)


def test_a_closed_local_file_says_so_and_an_empty_one_is_not_mapped(file, tmp_path: Path) -> None:
    path, _ = file
    f = LocalFile(path)
    f.close()
    with pytest.raises(StorageError, match=r"f\.bin: file is closed") as info:
        f.pread(0, 4)
    assert info.value.errno == errno.EBADF
    with pytest.raises(StorageError, match=r"f\.bin: file is closed"):
        _ = f.direct_fd
    (tmp_path / "empty.bin").write_bytes(b"")
    with LocalFile(tmp_path / "empty.bin") as empty:
        with pytest.raises(ReadEOFError, match=r"empty\.bin: cannot map an empty file"):
            _ = empty.mapped


def test_o_direct_open_of_a_file_deleted_since_it_was_opened(file) -> None:
    # The O_DIRECT descriptor is a second open, made on first use: of the file the
    # reader holds, not of whatever the path names by then.
    path, data = file
    f = LocalFile(path)
    os.unlink(path)
    try:
        assert f.pread(0, 8).tobytes() == data[:8].tobytes()
        # The reader's own open, made before the unlink.
        with RangeReader("odirect", opener=lambda _: f) as r:
            got = r.read(path, [(5, 5000), (SIZE, 100)])
        assert [g.tobytes() for g in got] == [data[5:5005].tobytes(), data[SIZE:].tobytes()]
    finally:
        f.close()


@pytest.mark.parametrize("engine", ENGINES)
def test_o_direct_reads_the_file_opened_not_one_renamed_over_it(file, engine, tmp_path) -> None:
    # A dataset rewritten in place (write a new file, rename it over the old) while a
    # reader holds the old one: O_DIRECT reads, like mapped and buffered ones, keep
    # reading the old file, never a mix of the two.
    path, data = file
    with RangeReader(ReaderConfig(strategy="odirect", engine=engine)) as r:
        assert r.size(path) == data.size  # opened here
        new = tmp_path / "new.bin"
        new.write_bytes(bytes(data.size))
        os.rename(new, path)
        got = r.read(path, [(0, 4096), (SIZE - 7, 107)])
    assert [g.tobytes() for g in got] == [data[:4096].tobytes(), data[SIZE - 7 :].tobytes()]


def _refuse_maps(monkeypatch: pytest.MonkeyPatch, err: int) -> list[int]:
    import mmap

    calls: list[int] = []

    real = mmap.mmap

    def refuse(fd: int, *args: object, **kwargs: object) -> mmap.mmap:
        if kwargs.get("access") != mmap.ACCESS_READ:  # io_uring's rings map as before
            return real(fd, *args, **kwargs)  # type: ignore[arg-type]
        calls.append(fd)
        raise OSError(err, os.strerror(err))

    monkeypatch.setattr(mmap, "mmap", refuse)
    return calls


@pytest.mark.parametrize("engine", ENGINES)
def test_a_filesystem_that_cannot_map_files(file, engine, monkeypatch) -> None:
    # FUSE mounts with direct_io (before Linux 6.6) and sysfs answer mmap with ENODEV.
    # 'mmap' says so, as 'odirect' does where O_DIRECT is refused; 'adaptive' reads in
    # parallel, as pread does, instead of failing where pread works.
    from headrace.errors import ConfigError

    path, data = file
    calls = _refuse_maps(monkeypatch, errno.ENODEV)
    ranges = [(0, 10), (SIZE - 5, 50), (3, 0), (0, 10)]
    with RangeReader(ReaderConfig(strategy="mmap", engine=engine)) as r:
        with pytest.raises(
            ConfigError,
            match=r"f\.bin: the filesystem does not support memory "
            r"mapping .*ENODEV.*'pread' or 'adaptive'",
        ):
            r.read(path, ranges)
    with RangeReader(ReaderConfig(strategy="adaptive", engine=engine)) as r:
        for _ in range(40):  # past a probe of mapped reads (every 32)
            got = r.read(path, ranges)
            assert [g.tobytes() for g in got] == [data[o : o + n].tobytes() for o, n in ranges]
        stats = r.stats
    assert stats.reads_by_mode == {"pread": 40}
    assert len(calls) == 2  # one refusal per file and reader, remembered


def test_a_map_refused_for_another_reason_names_the_file(file, monkeypatch) -> None:
    path, _ = file
    _refuse_maps(monkeypatch, errno.ENOMEM)
    with (
        RangeReader("adaptive") as r,
        pytest.raises(
            StorageError,
            match=r"f\.bin: cannot "
            r"memory-map the file",
        ) as info,
    ):
        r.read(path, [(0, 10)])
    assert info.value.errno == errno.ENOMEM


@pytest.mark.skipif(
    not os.path.exists("/sys/kernel/mm/transparent_hugepage/enabled"), reason="no such sysfs file"
)
def test_a_sysfs_file_is_read_by_the_adaptive_reader() -> None:
    # A real file whose filesystem refuses maps (ENODEV), read through every strategy.
    from headrace.errors import ConfigError

    path = "/sys/kernel/mm/transparent_hugepage/enabled"
    with open(path, "rb") as fh:
        want = fh.read(8)
    with RangeReader("adaptive") as r:
        assert r.read(path, [(0, 8)])[0].tobytes() == want
    with RangeReader("mmap") as r, pytest.raises(ConfigError, match="memory mapping"):
        r.read(path, [(0, 8)])


def test_running_out_of_descriptors_while_mapping_names_the_file(file) -> None:
    # A map holds a duplicate of the file's descriptor, so mapped reads of many files
    # reach `ulimit -n` at half the files positional reads do. With one descriptor
    # left, the open succeeds and the map fails: a StorageError naming the file and
    # the fix, not a bare OSError from mmap.
    path, data = file
    code = f"""
import errno, os, resource
from headrace.errors import StorageError
from headrace.io import RangeReader
resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
held = []
try:
    while True:
        held.append(os.open('/dev/null', os.O_RDONLY))
except OSError as e:
    assert e.errno == errno.EMFILE
os.close(held.pop())
with RangeReader('mmap') as r:
    try:
        r.read({path!r}, [(0, 3)])
    except StorageError as e:
        print(type(e).__name__, e.errno, e)
for fd in held:
    os.close(fd)
with RangeReader('mmap') as r:
    print(r.read({path!r}, [(0, 3)])[0].tobytes().hex())
"""
    env = {**os.environ, "HEADRACE_IO_URING": "0"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    ).stdout
    assert f"StorageError {errno.EMFILE} " in out, out
    assert "f.bin: cannot memory-map the file" in out and "ulimit -n" in out, out
    assert out.splitlines()[-1] == data[:3].tobytes().hex()


def test_o_direct_without_proc_refuses_a_file_renamed_over_it(file, tmp_path, monkeypatch) -> None:
    # Without /proc the second open goes by path; another file there is an error.
    path, _ = file
    real = os.path.exists
    monkeypatch.setattr(os.path, "exists", lambda p: not str(p).startswith("/proc/") and real(p))
    with LocalFile(path) as f:
        (tmp_path / "new.bin").write_bytes(bytes(100))
        os.rename(tmp_path / "new.bin", path)
        with pytest.raises(
            StorageError,
            match=r"f\.bin: the file was replaced since it was "
            r"opened",
        ) as info:
            _ = f.direct_fd
        assert info.value.errno == errno.ESTALE
    with LocalFile(path) as f:  # not replaced: opened by path, and read
        assert f.direct_fd >= 0


def test_a_direct_io_fuse_mount_is_read_by_the_adaptive_reader(tmp_path: Path, slow_mount) -> None:
    # slowfs --direct-io: a FUSE mount that refuses maps (ENODEV) for real.
    from headrace.errors import ConfigError

    src = tmp_path / "src"
    src.mkdir()
    data = np.random.default_rng(9).integers(0, 256, 300_000, dtype=np.uint8)
    (src / "d.bin").write_bytes(data.tobytes())
    m = slow_mount(src, direct_io=True)
    path = str(m.mnt / "d.bin")
    rows = np.array([3, 0, 70, 3])
    with RangeReader("adaptive") as r:
        got = r.read_rows(path, rows, 4100)
    assert got.tobytes() == b"".join(data[i * 4100 : (i + 1) * 4100].tobytes() for i in rows)
    with RangeReader("mmap") as r, pytest.raises(ConfigError, match="memory mapping"):
        r.read_rows(path, rows, 4100)
