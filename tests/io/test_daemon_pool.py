"""The shared I/O pools' executor: ThreadPoolExecutor's contract, on daemon threads."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from concurrent.futures import CancelledError
from pathlib import Path

import numpy as np
import pytest

from headrace.io._daemon_pool import DaemonPool, one_call_pool


def test_results_errors_and_threads_as_a_thread_pool_gives_them() -> None:
    pool = DaemonPool(3, thread_name_prefix="t-pool")
    assert list(pool.map(lambda x: x * x, range(50))) == [x * x for x in range(50)]
    with pytest.raises(ZeroDivisionError):
        pool.submit(lambda: 1 // 0).result(5)
    assert 1 <= len(pool._threads) <= 3  # started on demand, reused, never past the bound
    assert all(t.daemon and t.name.startswith("t-pool_") for t in pool._threads)
    pool.shutdown()
    assert not any(t.is_alive() for t in pool._threads)
    with pytest.raises(RuntimeError, match="after shutdown"):
        pool.submit(print)


def test_shutdown_can_cancel_what_has_not_started() -> None:
    pool = DaemonPool(1, thread_name_prefix="t-pool")
    gate = threading.Event()
    running = pool.submit(gate.wait, 5)
    queued = [pool.submit(time.sleep, 0) for _ in range(5)]
    pool.shutdown(wait=False, cancel_futures=True)
    gate.set()
    assert running.result(5) is True
    for f in queued:
        with pytest.raises(CancelledError):
            f.result(5)
    pool._threads[0].join(5)
    assert not pool._threads[0].is_alive()


def test_shutdown_waits_at_most_its_timeout_for_a_stuck_task() -> None:
    pool = DaemonPool(1, thread_name_prefix="t-stuck")
    release = threading.Event()
    done = pool.submit(release.wait, 30)
    t0 = time.monotonic()
    pool.shutdown(wait=True, timeout=0.1)
    assert time.monotonic() - t0 < 10  # a bound on hanging, not a speed check
    assert pool._threads[0].is_alive()  # left to end on its daemon thread
    release.set()
    assert done.result(10) is True
    pool._threads[0].join(10)
    assert not pool._threads[0].is_alive()


def test_a_one_call_pool_joins_when_done_and_leaves_a_stuck_task_on_an_error() -> None:
    with one_call_pool(2, thread_name_prefix="t-call") as pool:
        assert list(pool.map(abs, [-1, -2, -3])) == [1, 2, 3]
    assert pool._threads and not any(t.is_alive() for t in pool._threads)

    gate = threading.Event()
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt), one_call_pool(1, thread_name_prefix="t-call") as pool:
        running = pool.submit(gate.wait, 30)
        queued = pool.submit(time.sleep, 0)
        raise KeyboardInterrupt  # a Ctrl-C while the task waits for stalled storage
    assert time.monotonic() - t0 < 5  # a ThreadPoolExecutor's with block waited 30 s
    assert queued.cancelled() and not running.done()
    gate.set()  # the storage answers: the thread ends, nothing more to run
    assert running.result(5) is True
    pool._threads[0].join(5)
    assert not pool._threads[0].is_alive()


def test_a_task_that_never_returns_does_not_hold_the_exit() -> None:
    # A read stuck in a stalled mount: ThreadPoolExecutor's exit joins its threads, so
    # the process waited for the storage (measured: for ever, on a SIGSTOPped slowfs).
    script = (
        "import threading\n"
        "from headrace.io import _pool\n"
        "stuck = threading.Event()\n"
        "_pool.io_pool().submit(stuck.wait)\n"
        "_pool.deep_io_pool().submit(stuck.wait)\n"
        "print('submitted', flush=True)\n"
    )
    t0 = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "submitted\n", "")
    assert time.monotonic() - t0 < 30


@pytest.mark.skipif(
    sys.version_info[:2] == (3, 12), reason="Python 3.12 starts no thread in an exit handler"
)
def test_a_loader_reads_in_an_exit_handler(tmp_path: Path) -> None:
    # The pools were ThreadPoolExecutors, which Python shuts down before exit handlers
    # run: "RuntimeError: cannot schedule new futures after interpreter shutdown".
    path = tmp_path / "t.bin"
    np.arange(1 << 16, dtype=np.uint32).tofile(path)
    script = (
        "import atexit\n"
        "from headrace.formats import TokenSource\n"
        "from headrace.pipeline import Loader\n"
        "from headrace.testing import batch_digest\n"
        "def at_exit():\n"
        f"    src = TokenSource({str(path)!r}, dtype='uint32', context=128)\n"
        "    with Loader(src, batch_size=8, steps=3) as ld:\n"
        "        print(batch_digest(list(ld)))\n"
        "atexit.register(at_exit)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    from headrace.formats import TokenSource
    from headrace.pipeline import Loader
    from headrace.testing import batch_digest

    with Loader(TokenSource(path, dtype="uint32", context=128), batch_size=8, steps=3) as ld:
        want = batch_digest(list(ld))
    assert (done.returncode, done.stdout, done.stderr) == (0, want + "\n", "")
