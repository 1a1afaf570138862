"""The shared I/O pools' executor: ThreadPoolExecutor's contract, on daemon threads."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from concurrent.futures import CancelledError

import pytest

from headrace.io._daemon_pool import DaemonPool


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
