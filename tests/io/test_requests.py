"""RequestQueue: bounded coroutines on a private loop, concurrent futures for threads."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import wait
from typing import Any

import pytest

from headrace.errors import ConfigError, StorageError
from headrace.io import RequestQueue
from headrace.io._loop import LoopThread


def test_runs_everything_with_at_most_max_in_flight() -> None:
    q = RequestQueue(3)
    running = 0
    peak = 0

    async def job(i: int) -> int:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.005)
        running -= 1
        return i * i

    futures = [q.submit(lambda i=i: job(i)) for i in range(20)]  # type: ignore[misc]
    assert [f.result(timeout=10) for f in futures] == [i * i for i in range(20)]
    assert peak == 3 == q.stats.max_in_flight_observed
    assert q.stats.submitted == q.stats.finished == 20 and q.stats.in_flight == 0
    q.close()


def test_a_failure_is_its_own_future_only() -> None:
    q = RequestQueue(2)

    async def job(i: int) -> int:
        if i == 3:
            raise StorageError("s3://b/k, bytes [0, 4): boom")
        return i

    futures = [q.submit(lambda i=i: job(i)) for i in range(6)]  # type: ignore[misc]
    wait(futures, timeout=10)
    assert [f.exception() is None for f in futures] == [True, True, True, False, True, True]
    with pytest.raises(StorageError, match="boom"):
        futures[3].result()
    q.close()


def test_close_cancels_waiting_work_and_joins_the_thread() -> None:
    before = threading.active_count()
    q = RequestQueue(1)
    gate = asyncio.Event()

    async def blocked() -> None:
        await gate.wait()

    futures = [q.submit(blocked) for _ in range(3)]
    assert threading.active_count() == before + 1
    q.close()
    assert all(f.cancelled() for f in futures)
    assert threading.active_count() == before
    with pytest.raises(StorageError, match="closed"):
        q.submit(blocked)


def test_bad_depth_is_refused() -> None:
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ConfigError, match="max_in_flight must be an integer >= 1"):
            RequestQueue(bad)  # type: ignore[arg-type]


def _loop_threads(name: str) -> int:
    return sum(t.name == name for t in threading.enumerate())


def test_a_queue_dropped_without_close_stops_its_loop_thread() -> None:
    # A source that is never closed (a loader left by break, made per epoch) drops its
    # queue: the loop thread must not outlive it, or a long job gains one per source.
    import gc

    before = _loop_threads("headrace-dropped")
    for _ in range(5):
        q = RequestQueue(2, name="headrace-dropped")

        async def job() -> int:
            return 1

        assert q.submit(job).result(timeout=10) == 1
        del q
    gc.collect()
    deadline = time.monotonic() + 5
    while _loop_threads("headrace-dropped") > before:
        assert time.monotonic() < deadline, "loop threads outlived their queues"
        time.sleep(0.01)


def test_a_ctrl_c_while_the_loop_thread_starts_stops_that_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # KeyboardInterrupt delivered while Thread.start() waits for the new thread (where
    # a blocked main thread meets the signal): the loop runs, but nobody holds it to
    # close it, so it must stop by itself.
    real_start = threading.Thread.start

    def interrupted(self: threading.Thread) -> None:
        real_start(self)
        if self.name == "headrace-interrupted":
            raise KeyboardInterrupt

    monkeypatch.setattr(threading.Thread, "start", interrupted)
    with pytest.raises(KeyboardInterrupt):
        LoopThread("headrace-interrupted")
    monkeypatch.undo()
    deadline = time.monotonic() + 5
    while _loop_threads("headrace-interrupted"):
        assert time.monotonic() < deadline, "the loop thread outlived its interrupted start"
        time.sleep(0.01)


def test_a_slot_held_by_a_thread_counts_against_the_bound() -> None:
    q = RequestQueue(2)
    running = 0
    peak = 0
    lock = threading.Lock()

    def enter() -> None:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)

    def leave() -> None:
        nonlocal running
        with lock:
            running -= 1

    async def job() -> None:
        enter()
        await asyncio.sleep(0.005)
        leave()

    def blocking() -> None:  # a GET made on the caller's thread, as a whole-file fetch is
        with q.slot():
            enter()
            threading.Event().wait(0.005)
            leave()

    threads = [threading.Thread(target=blocking) for _ in range(4)]
    for t in threads:
        t.start()
    futures = [q.submit(job) for _ in range(8)]
    for t in threads:
        t.join(timeout=10)
    wait(futures, timeout=10)
    # A slot is given back by a call onto the loop: its place is counted finished a
    # moment after the thread left the block (11 of 12 seen once in a fresh-clone CI).
    deadline = time.monotonic() + 10  # a bound on hanging, not a speed check
    while q.stats.finished < 12 and time.monotonic() < deadline:
        threading.Event().wait(0.001)
    assert peak <= 2 and q.stats.max_in_flight_observed == 2
    assert q.stats.submitted == q.stats.finished == 12
    q.close()


def test_a_slot_where_no_thread_may_start_is_given_in_the_callers_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Fault injection: Python 3.12 starts no thread in an exit handler, so the queue's
    # coroutines run in their callers' threads (LoopThread's inline fallback); a slot
    # (a whole-file GET beside ranged ones, in FileSource) waited for ever there.
    start = threading.Thread.start

    def refused(self: threading.Thread) -> None:
        if self.name == "headrace-requests":
            raise RuntimeError("can't create new thread at interpreter shutdown")
        start(self)

    monkeypatch.setattr(threading.Thread, "start", refused)
    q = RequestQueue(2)
    done: list[int] = []

    async def job() -> int:
        return 7

    def caller() -> None:
        with q.slot():
            done.append(q.submit(job).result(timeout=10))

    t = threading.Thread(target=caller, daemon=True)
    t.start()
    t.join(timeout=10)
    assert not t.is_alive(), "the slot was never given"
    assert done == [7]
    q.close()


def test_a_slot_waited_for_when_the_queue_closes_is_a_storage_error() -> None:
    q = RequestQueue(1)
    gate = asyncio.Event()

    async def blocked() -> None:
        await gate.wait()

    q.submit(blocked)
    got: list[BaseException] = []

    def waiter() -> None:
        try:
            with q.slot():
                pass
        except StorageError as exc:
            got.append(exc)

    t = threading.Thread(target=waiter)
    t.start()
    while q.stats.submitted < 2:
        threading.Event().wait(0.001)
    q.close()
    t.join(timeout=10)
    assert not t.is_alive()
    assert len(got) == 1 and "closed while waiting" in str(got[0])


def test_a_slot_admitted_as_the_queue_closes_is_a_storage_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # close() on another thread cancels the request holding the only place, which admits
    # the slot waiting for it a moment before the slot's own turn to be cancelled: the
    # slot's thread wakes admitted, on a queue already closed. It must not run its block,
    # and giving its place back on the loop that closed meanwhile must not raise either.
    from headrace.io import _requests

    q = RequestQueue(1)
    waited = _requests.result

    def admitted_then_closed(future: Any) -> Any:
        got = waited(future)  # admitted
        q.close()  # then closed, before the block
        return got

    monkeypatch.setattr(_requests, "result", admitted_then_closed)
    ran = []
    with pytest.raises(StorageError, match="the request queue closed while waiting"):
        with q.slot():
            ran.append(1)
    assert ran == []


def test_a_submit_that_meets_close_is_a_storage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    # close() on another thread between submit() finding the loop and scheduling on it:
    # the closed loop's RuntimeError ("Event loop is closed") escaped, seen once in 300
    # runs of the slot test above.
    async def noop() -> None:
        return None

    q = RequestQueue(1)
    q.submit(noop).result(timeout=10)  # the loop thread is running
    found = q._loop_thread

    def then_closed() -> LoopThread:
        loop = found()
        q.close()
        return loop

    monkeypatch.setattr(q, "_loop_thread", then_closed)
    with pytest.raises(StorageError, match="request queue is closed"):
        q.submit(noop)
