"""Edge cases of the range-read engine found in a storage review (s47)."""

from __future__ import annotations

import os
import threading
from concurrent.futures import Executor, Future
from pathlib import Path

import numpy as np
import pytest

from _cold import FakeClock, cold_opener
from headrace.errors import ConfigError, ReadEOFError
from headrace.io import LocalFile, RangeReader
from headrace.io._batch import run_batch
from headrace.io._pool import _ALL, SharedPool

ALL = ("adaptive", "mmap", "pread", "odirect", "odirect-serial")


@pytest.fixture
def data(tmp_path: Path) -> tuple[str, np.ndarray]:
    arr = np.random.default_rng(47).integers(0, 256, 256 * 1024, dtype=np.uint8)
    path = tmp_path / "data.bin"
    path.write_bytes(arr.tobytes())
    return str(path), arr


@pytest.mark.parametrize("strategy", ALL)
def test_read_rows_into_a_read_only_out_is_refused_before_reading(data, strategy) -> None:
    # NumPy's "assignment destination is read-only" came from the gather, after the
    # whole read: a ConfigError naming out now, and nothing read.
    path, _ = data
    out = np.zeros((2, 4), np.uint8)
    out.flags.writeable = False
    with RangeReader(strategy) as r:
        with pytest.raises(ConfigError, match="out is read-only"):
            r.read_rows(path, [1, 2], 4, out=out)
        assert r.stats.reads == 0
    assert not out.any()


def test_a_batch_on_a_pool_resized_meanwhile_still_reads(data) -> None:
    # set_io_threads while a read had taken the pool but not yet submitted its
    # loops: "RuntimeError: cannot schedule new futures after shutdown".
    path, arr = data
    shared = SharedPool("headrace-test-s47", "HEADRACE_TEST_S47_THREADS", 4)
    try:
        taken = shared.get()
        shared.resize(2)  # another thread resizes the pool
        buf = np.zeros(8 * 4096, np.uint8)
        with LocalFile(path) as f:

            def read(i: int) -> None:
                f.pread_into(buf[i * 4096 : (i + 1) * 4096], i * 8192)

            run_batch(8, read, depth=4, pool=taken)
        want = np.concatenate([arr[i * 8192 : i * 8192 + 4096] for i in range(8)])
        assert np.array_equal(buf, want)
        assert shared.get() is not taken
    finally:
        _ALL.remove(shared)


def test_a_resized_pool_threads_end_once_its_batches_are_done() -> None:
    # Dropped rather than shut down on resize: its threads must still end, not leak.
    shared = SharedPool("headrace-test-s47b", "HEADRACE_TEST_S47_THREADS", 3)
    try:
        old = shared.get()
        assert old.submit(lambda: 1).result() == 1
        names = {t.name for t in threading.enumerate() if t.name.startswith("headrace-test-s47b")}
        assert names
        shared.resize(2)
        del old
        for t in threading.enumerate():
            if t.name in names:
                t.join(10)
                assert not t.is_alive()
    finally:
        _ALL.remove(shared)


def test_a_file_linked_from_a_local_folder_into_a_network_mount_is_on_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A dataset folder of symlinks into an NFS share (or a Hugging Face snapshot, whose
    # files link to blobs elsewhere): the folder's mount was asked, so the file read as
    # local, and a mapped read of it skipped the populate that turns a failed page into
    # an error instead of SIGBUS.
    from headrace.io import _mounts

    share, local = tmp_path / "share", tmp_path / "local"
    share.mkdir()
    local.mkdir()
    (share / "data.bin").write_bytes(b"x" * 10)
    (local / "data.bin").symlink_to(share / "data.bin")
    table = [_mounts.Mount("/dev/root", "/", "ext4"), _mounts.Mount("srv:/", str(share), "nfs4")]
    monkeypatch.setattr(_mounts, "_mounts", lambda: table)  # a mount table with the share
    _mounts._network_folder.cache_clear()
    try:
        assert _mounts.on_network_fs(share / "data.bin")
        assert _mounts.on_network_fs(local / "data.bin")
        assert not _mounts.on_network_fs(local / "other.bin")
    finally:
        _mounts._network_folder.cache_clear()


@pytest.mark.parametrize("engine", ["threads", "uring"])
@pytest.mark.parametrize("strategy", ALL)
def test_a_positional_read_past_a_shrunk_end_names_the_callers_range(
    tmp_path: Path, strategy, engine
) -> None:
    # Positional reads named only the coalesced span ("read of bytes [0, 30010)"),
    # bytes no caller asked for, and not that the file shrank; mapped reads name range
    # 2. A note names it now (the span stays in the message, as the engines say it).
    from headrace.io import ReaderConfig
    from headrace.io._uring import ring_pool

    if engine == "uring" and not ring_pool().available():
        pytest.skip("io_uring is not available here")
    path = tmp_path / "data.bin"
    path.write_bytes(b"A" * 100_000)
    with RangeReader(ReaderConfig(strategy=strategy, engine=engine)) as r:
        r.read(str(path), [(0, 10)])
        os.truncate(path, 30_000)
        with pytest.raises(
            ReadEOFError,
            match=r"range 2 = bytes \[29990, 30010\) is past the end of the file, which has "
            r"30000 bytes \(it had 100000 bytes when opened: it shrank\)",
        ) as info:
            r.read(str(path), [(0, 6), (20_000, 6), (29_990, 20)])
    said = [str(info.value), *getattr(info.value, "__notes__", [])]
    assert sum("range 2 = bytes [29990, 30010)" in s for s in said) == 1  # said once


class _StartedPool(Executor):
    """Runs each task on a new thread, and returns from submit once the task's first
    read has begun: which read each thread makes is then fixed."""

    def __init__(self, started: threading.Event) -> None:
        self.started = started

    def submit(self, fn, /, *args, **kwargs):  # type: ignore[no-untyped-def]
        future: Future[None] = Future()

        def run() -> None:
            future.set_running_or_notify_cancel()
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as exc:
                future.set_exception(exc)

        threading.Thread(target=run, daemon=True).start()
        assert self.started.wait(10)
        return future


def test_a_ctrl_c_in_a_batch_is_raised_over_a_lower_reads_failure(data) -> None:
    # Read 0 (a pool thread) stuck in storage, Ctrl-C in the caller's read 1, then
    # read 0 fails: the batch raised read 0's EIO, the lowest, and the Ctrl-C was lost.
    path, _ = data
    started, interrupted = threading.Event(), threading.Event()
    buf = np.zeros(4096, np.uint8)
    caller = threading.get_ident()
    with LocalFile(path) as f:

        def read(i: int) -> None:
            if threading.get_ident() != caller:
                started.set()
                assert interrupted.wait(10)
                raise OSError(5, "Input/output error")
            f.pread_into(buf, 0)
            interrupted.set()
            raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt) as info:
            run_batch(2, read, depth=2, pool=_StartedPool(started))
    assert "1 other read(s) of the same batch also failed." in (info.value.__notes__ or [])


FORK_WHILE_POOL_LOCKED = """
import os, signal, sys, threading, warnings
warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads running
import numpy as np
from headrace.io import RangeReader, ReaderConfig
from headrace.io import _open_files, _pool
path, lock = sys.argv[1], eval(sys.argv[2])
want = np.fromfile(path, np.uint8)
ranges = [(i * 20_000 + 7, 5000) for i in range(8)]

def check():
    with RangeReader(ReaderConfig(strategy="pread", engine="threads", in_flight=4)) as r:
        out = r.read(path, ranges)
    assert all(np.array_equal(o, want[a : a + n]) for o, (a, n) in zip(out, ranges))

check()
held, done = threading.Event(), threading.Event()

def inside_the_pool():  # as a thread inside get(), resize() or hold_files() at the fork
    with lock:
        held.set()
        done.wait()

t = threading.Thread(target=inside_the_pool)
t.start()
held.wait()
pid = os.fork()
if pid == 0:
    signal.alarm(5)  # a child stuck on the parent's lock dies of SIGALRM
    try:
        _pool._io.resize(3)  # a new executor to make: the lock is taken
        check()
    except BaseException:
        os._exit(1)
    os._exit(0)
done.set()
t.join()
_, status = os.waitpid(pid, 0)
print("child", os.waitstatus_to_exitcode(status))
"""


@pytest.mark.parametrize("lock", ["_pool._io._lock", "_open_files._HOLDERS_LOCK"])
def test_a_child_forked_while_a_thread_holds_a_pools_lock_can_read(data, lock) -> None:
    # The child's copy of the lock stayed held by a thread it does not have: its
    # first read waited on it for ever.
    import subprocess
    import sys

    path, _ = data
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run(
        [sys.executable, "-c", FORK_WHILE_POOL_LOCKED, path, lock],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert (proc.returncode, proc.stdout) == (0, "child 0\n"), proc.stderr


@pytest.mark.parametrize(
    "rows",
    [
        [7] * 16,  # one row drawn 16 times (sampling with replacement, an upsampled source)
        [0, 1, 2, 3] * 2,  # four 1 KiB rows of one page, each twice
    ],
)
def test_the_mapped_check_counts_a_page_shared_by_rows_as_one_fault(data, rows) -> None:
    # Each row's pages were counted as faults of their own: 16 rows of one page were
    # 16 x 5 ms, and a read that faults one page was made in parallel instead.
    from headrace.io import ReaderConfig

    path, arr = data
    clock = FakeClock()
    opener = cold_opener(clock)

    cfg = ReaderConfig(strategy="adaptive", engine="threads", in_flight=4)
    with RangeReader(cfg, clock=clock, opener=opener) as r:
        got = r.read_rows(path, rows, 1024)
        assert np.array_equal(got, arr.reshape(-1, 1024)[rows])
        s = r.stats
        assert (s.mapped_checks, s.mapped_declined, s.reads_by_mode) == (1, 0, {"mmap": 1})


@pytest.mark.parametrize("strategy", ALL)
def test_a_reader_pickles_to_a_fresh_reader_of_the_same_config(data, strategy) -> None:
    # A RangeReader kept in a Dataset, sent to spawn or forkserver workers: "TypeError:
    # cannot pickle '_thread.lock' object". The copy reads with the same config; the
    # open files, stats and policy state stay the original's.
    import pickle

    from headrace.io import ReaderConfig

    path, arr = data
    cfg = ReaderConfig(strategy=strategy, engine="threads", max_gap=0, in_flight=3)
    with RangeReader(cfg) as r:
        r.read(path, [(0, 10)])
        with pickle.loads(pickle.dumps(r)) as copy:
            assert copy.config == cfg and copy.stats.reads == 0 and copy.open_files == 0
            got = copy.read(path, [(5, 100), (200_000, 7)])
            assert [g.tobytes() for g in got] == [
                arr[5:105].tobytes(),
                arr[200_000:200_007].tobytes(),
            ]
        assert r.open_files == 1 and r.stats.reads == 1


@pytest.mark.parametrize("strategy", ["mmap", "pread"])
def test_torch_tensors_are_buffers_to_read_into(data, strategy) -> None:
    # A (pinned) CPU tensor as the destination: read_rows said "out must be a uint8
    # array of shape (2, 4) (got torch.uint8 torch.Size([2, 4]))", and read_into that
    # it was "not a contiguous buffer"; a list as out raised AttributeError.
    torch = pytest.importorskip("torch")
    path, arr = data
    with RangeReader(strategy) as r:
        out = torch.zeros((2, 4), dtype=torch.uint8)
        r.read_rows(path, [1, 3], 4, out=out)
        assert out.numpy().tobytes() == arr[4:8].tobytes() + arr[12:16].tobytes()
        outs = [torch.zeros(4, dtype=torch.uint8), torch.zeros(2, dtype=torch.float32)]
        r.read_into(path, [(100, 4), (200, 8)], outs)
        assert outs[0].numpy().tobytes() == arr[100:104].tobytes()
        assert outs[1].numpy().tobytes() == arr[200:208].tobytes()
        with pytest.raises(ConfigError, match=r"Buffer 0 is not a contiguous buffer"):
            r.read_into(path, [(0, 2)], [torch.zeros((2, 2), dtype=torch.uint8)[:, 0]])
        with pytest.raises(ConfigError, match=r"out must be a uint8 array .*\(got float32"):
            r.read_rows(path, [1], 4, out=torch.zeros((1, 4)))
        with pytest.raises(ConfigError, match=r"out must be a uint8 array .*\(got a list\)"):
            r.read_rows(path, [1], 4, out=[[0] * 4])  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match=r"^Buffer 0 \(Tensor\) cannot be read into: .*grad"):
            r.read_into(path, [(0, 16)], [torch.zeros(4, requires_grad=True)])
        with pytest.raises(ConfigError, match=r"out's rows are one memory"):
            r.read_rows(path, [1, 2], 4, out=torch.zeros((1, 4), dtype=torch.uint8).expand(2, 4))
