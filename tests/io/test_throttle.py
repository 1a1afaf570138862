"""InFlightLimit: the adaptive bound on an object store's tries in flight (AIMD)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from headrace.io._retry import is_throttle
from headrace.io._throttle import InFlightLimit


def test_no_limit_until_the_store_throttles() -> None:
    lim = InFlightLimit()
    tickets = [lim.acquire_blocking() for _ in range(100)]  # none waits
    assert tickets == list(range(1, 101))
    for t in tickets:
        lim.release(t)
    s = lim.stats()
    assert (s.throttled, s.cuts, s.limit, s.lowest) == (0, 0, None, None)


def test_a_throttle_halves_what_was_in_flight_once_per_round() -> None:
    lim = InFlightLimit()
    tickets = [lim.acquire_blocking() for _ in range(16)]
    lim.release(tickets[0], throttled=True)  # 16 were in flight: limit 8
    assert lim.stats().limit == 8.0
    # Tries sent before that cut were sent at 16: their throttles do not cut again.
    for t in tickets[1:6]:
        lim.release(t, throttled=True)
    s = lim.stats()
    assert (s.throttled, s.cuts, s.limit) == (6, 1, 8.0)
    for t in tickets[6:]:
        lim.release(t)  # successes: +1/limit each
    grown = lim.stats().limit
    assert grown == pytest.approx(8.0 + 10 / 8, abs=0.1)
    # A try sent after the cut, throttled: cut again, to half of what was in flight
    # (6 here, under the limit)...
    later = [lim.acquire_blocking() for _ in range(6)]
    lim.release(later[0], throttled=True)
    s = lim.stats()
    assert s.cuts == 2 and s.limit == 3.0 and s.lowest == 3.0
    # ... and to half the limit when more were in flight than it allows (tries
    # admitted before it was cut).
    for t in later[1:]:
        lim.release(t)
    limit = lim.stats().limit
    assert limit is not None
    t = lim.acquire_blocking()
    lim._active += 9  # nine more in flight than were admitted under this limit
    lim.release(t, throttled=True)
    assert lim.stats().limit == pytest.approx(limit / 2)


def test_the_limit_never_falls_below_one_and_grows_back() -> None:
    lim = InFlightLimit()
    for _ in range(10):
        lim.release(lim.acquire_blocking(), throttled=True)
    assert lim.stats().limit == 1.0
    for _ in range(3):  # 1 -> 2 -> 2.5 -> 2.9
        lim.release(lim.acquire_blocking())
    assert lim.stats().limit == pytest.approx(2.9, abs=0.01)


def test_off_it_counts_throttles_but_never_limits() -> None:
    lim = InFlightLimit(adapt=False)
    tickets = [lim.acquire_blocking() for _ in range(8)]
    for t in tickets:
        lim.release(t, throttled=True)
    s = lim.stats()
    assert (s.throttled, s.cuts, s.limit) == (8, 0, None)
    assert len([lim.acquire_blocking() for _ in range(50)]) == 50


def _limited_to(n: int) -> InFlightLimit:
    """A limit of exactly ``n`` (2n in flight, one throttled)."""
    lim = InFlightLimit()
    held = [lim.acquire_blocking() for _ in range(2 * n)]
    lim.release(held[0], throttled=True)
    for t in held[1:]:
        lim._active -= 1  # returned without a success: leaves the limit at n
        del t
    assert lim.stats().limit == n
    return lim


def test_threads_wait_for_a_slot_in_arrival_order() -> None:
    lim = _limited_to(2)
    a, b = lim.acquire_blocking(), lim.acquire_blocking()
    granted: dict[str, int] = {}

    def waiter2(name: str) -> None:
        t = lim.acquire_blocking()
        granted[name] = t
        lim.release(t)

    threads = []
    for n, name in enumerate(("first", "second", "third"), 1):
        th = threading.Thread(target=waiter2, args=(name,))
        th.start()
        threads.append(th)
        # Queued in this order: the next starts once this one waits (a sleep here let a
        # thread that a loaded machine had not yet run queue behind the next one).
        deadline = time.monotonic() + 10  # a bound on hanging, not a speed check
        while len(lim._waiting) < n:
            assert time.monotonic() < deadline, f"{name} never queued for a slot"
            time.sleep(0.001)
    assert granted == {}  # both slots held
    lim.release(a)
    lim.release(b)
    for th in threads:
        th.join(5)
    # Tickets number the tries in the order they got a slot: arrival order.
    assert sorted(granted, key=granted.__getitem__) == ["first", "second", "third"]
    assert lim._active == 0


def test_coroutines_on_two_loops_share_one_limit() -> None:
    lim = _limited_to(3)
    peak = [0]
    active = [0]
    guard = threading.Lock()

    async def one() -> None:
        t = await lim.acquire()
        with guard:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        await asyncio.sleep(0.01)
        with guard:
            active[0] -= 1
        lim.release(t)

    async def many() -> None:
        await asyncio.gather(*(one() for _ in range(20)))

    threads = [threading.Thread(target=asyncio.run, args=(many(),)) for _ in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(10)
    # Successes raise the limit a little: 3 + about 40 / 3.5 / ... stays well under 40.
    assert 3 <= peak[0] < 10
    assert lim._active == 0 and not lim._waiting


def test_a_cancelled_waiter_leaves_the_queue_or_passes_its_slot_on() -> None:
    lim = _limited_to(1)

    async def main() -> None:
        held = await lim.acquire()
        waiting = asyncio.ensure_future(lim.acquire())
        await asyncio.sleep(0.01)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert not lim._waiting
        # Granted and cancelled in the same turn: the slot goes back.
        second = asyncio.ensure_future(lim.acquire())
        await asyncio.sleep(0.01)
        lim.release(held)  # grants `second` (its future resolves on the next turn)
        second.cancel()
        with pytest.raises(asyncio.CancelledError):
            await second
        assert lim._active == 0
        t = await asyncio.wait_for(lim.acquire(), 1)  # the slot is free again
        lim.release(t)

    asyncio.run(main())


def test_a_thread_interrupted_while_waiting_leaves_the_queue() -> None:
    # Ctrl-C in the main thread while it waits for a slot: a real SIGINT, sent by
    # another thread once the main thread is queued.
    import signal

    lim = _limited_to(1)
    held = lim.acquire_blocking()

    def interrupt_when_queued() -> None:
        deadline = time.monotonic() + 5
        while not lim._waiting and time.monotonic() < deadline:
            time.sleep(0.001)
        signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)

    t = threading.Thread(target=interrupt_when_queued)
    t.start()
    with pytest.raises(KeyboardInterrupt):
        lim.acquire_blocking()
    t.join()
    assert not lim._waiting and lim._active == 1  # gone from the queue; the slot is held
    lim.release(held)
    lim.release(lim.acquire_blocking())  # the slot is free again


@pytest.mark.parametrize(
    ("text", "throttle"),
    [
        ("Generic S3 error: ... non-2xx status code: 503 Service Unavailable", True),
        ("Generic S3 error: ... status: 429", True),
        ("<Code>SlowDown</Code>", True),
        ("The server is busy (ServerBusy)", True),
        ("non-2xx status code: 500 Internal Server Error", False),
        ("connection reset by peer", False),
    ],
)
def test_which_answers_are_throttles(text: str, throttle: bool) -> None:
    assert is_throttle(RuntimeError(text)) is throttle


_FORK_SCRIPT = """
import os, signal
from headrace.io._throttle import InFlightLimit

lim = InFlightLimit()
held = [lim.acquire_blocking() for _ in range(2)]
lim.release(held.pop(), throttled=True)  # 2 were in flight: limit 1, one slot held
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    signal.alarm(5)  # a regression would block here: die, and the parent reads nothing
    try:
        ticket = lim.acquire_blocking()
        lim.release(ticket)
        s = lim.stats()
        os.write(w, f"{ticket} {s.limit} {s.throttled}".encode())
    finally:
        os._exit(0)
os.close(w)
with os.fdopen(r) as fh:
    got = fh.read()
os.waitpid(pid, 0)
lim.release(held.pop())
print(got, "|", lim._active, lim.stats().limit)
"""


def test_a_forked_child_starts_with_its_own_limit() -> None:
    # The parent is throttled down to 1 and holds that slot; a child forked now must
    # not wait on the parent's slot (nor wake the parent's waiters): fresh state. In a
    # fresh interpreter: this one may run threads (JAX) that make fork() unsafe.
    import subprocess
    import sys

    p = subprocess.run(
        [sys.executable, "-c", _FORK_SCRIPT], capture_output=True, text=True, timeout=30
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "1 None 0 | 0 2.0"
