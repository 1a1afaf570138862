"""Waiting for futures holding no lock (:mod:`headrace.io._waits`): an exception raised
inside the wait (what a Ctrl-C or a SIGTERM handler's ``SystemExit`` does to the main
thread) leaves the futures, and the pool threads that complete them, usable."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import Future

import pytest

from headrace.io import _waits
from headrace.io._daemon_pool import DaemonPool
from headrace.io._waits import result, wait_any, wait_done


@pytest.fixture
def pool() -> Iterator[DaemonPool]:
    p = DaemonPool(4, thread_name_prefix="t-waits")
    yield p
    p.shutdown()


def test_wait_done_returns_when_every_future_is_done_and_wait_any_when_one_is(
    pool: DaemonPool,
) -> None:
    gates = [threading.Event() for _ in range(3)]
    futures = [pool.submit(g.wait, 10) for g in gates]
    gates[1].set()
    wait_any(futures)
    assert futures[1].done()
    assert not futures[0].done() and not futures[2].done()
    gates[0].set()
    gates[2].set()
    wait_done(futures)
    assert all(f.done() for f in futures)
    wait_done([])
    wait_any([])


def test_failed_and_cancelled_futures_are_done_and_result_raises_the_error() -> None:
    def fails() -> None:
        raise OSError("read failed")

    pool = DaemonPool(1, thread_name_prefix="t-waits-one")
    gate = threading.Event()
    busy = pool.submit(gate.wait, 10)
    failed = pool.submit(fails)
    queued = pool.submit(print, "never")
    assert queued.cancel()
    threading.Timer(0.05, gate.set).start()
    # A cancelled future counts once the pool has dropped it, as with
    # concurrent.futures.wait: its call held what it would have read into till then.
    wait_done([busy, failed, queued])
    assert pool._work.empty()
    with pytest.raises(OSError, match="read failed"):
        result(failed)
    assert result(pool.submit(lambda: 7)) == 7
    pool.shutdown()


class _Interrupt(BaseException):
    pass


def test_an_exception_inside_the_wait_leaves_the_future_and_its_pool_thread_usable(
    pool: DaemonPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With concurrent.futures.wait or Future.result, an exception raised just after the
    # future's lock was taken inside the wait left it held: the pool thread setting
    # the result then waited for it for ever. Here nothing is held to leave.
    gate = threading.Event()
    fut = pool.submit(lambda: gate.wait(10) and "read")
    real = _waits.wakeup

    class Interrupted:
        def acquire(self, timeout: float) -> bool:
            raise _Interrupt

        def release(self) -> None:
            pass

    monkeypatch.setattr(_waits, "wakeup", Interrupted)
    with pytest.raises(_Interrupt):
        wait_done([fut])
    monkeypatch.setattr(_waits, "wakeup", real)
    gate.set()
    assert fut.result(timeout=5) == "read"  # the pool thread could set it
    assert result(fut) == "read"  # and it is waited for again
    assert result(pool.submit(lambda: "next")) == "next"


def test_a_lost_wake_up_costs_one_more_look(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_waits, "LOOK_S", 0.01)
    monkeypatch.setattr(_waits, "wake", lambda lock: None)  # every wake-up lost
    fut: Future[int] = Future()
    threading.Timer(0.05, fut.set_result, (3,)).start()
    assert result(fut) == 3
