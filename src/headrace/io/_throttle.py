"""How many requests a store keeps in flight when the store says "slow down".

A bucket that gets more requests than it serves answers some with HTTP 503
``SlowDown`` (S3, Azure's ``ServerBusy``) or 429 (GCS). Retrying each of them
after a backoff, at the same concurrency, keeps the store overloaded: with 64
reads in flight per worker, the retries meet the same limit, and a run gives
up once a read has used all its attempts. So every try of a request first
takes a slot from the store's :class:`InFlightLimit`, which adapts the way
TCP's congestion control does (additive increase, multiplicative decrease):

* No limit until the store first throttles: the callers' own ``in_flight``
  settings are the only bound, and a slot costs a lock and two additions.
* A throttled try halves the limit, to half the tries that were in flight
  when it was sent (at least 1). Tries sent before the last cut were sent at
  the old concurrency: their throttles do not cut again (one cut per round).
* Every try that succeeds adds ``1 / limit``, so about one slot per round of
  successes, until throttled again.

Tries waiting for a slot are served in arrival order, from any thread (a
blocking wait) or any event loop (an awaitable one). The limit changes which
requests wait, never what they return.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections import deque
from dataclasses import dataclass

__all__ = ["InFlightLimit", "LimitStats"]

_MAX_LIMIT = float(1 << 16)


@dataclass(frozen=True, slots=True)
class LimitStats:
    """``throttled``: tries answered "slow down"; ``cuts``: times the limit was halved;
    ``limit``: the limit now (``None``: never throttled); ``lowest``: its lowest value."""

    throttled: int = 0
    cuts: int = 0
    limit: float | None = None
    lowest: float | None = None


class _Waiter:
    __slots__ = ("event", "future", "granted", "loop", "ticket")

    def __init__(self, loop: asyncio.AbstractEventLoop | None) -> None:
        self.loop = loop
        self.future: asyncio.Future[None] | None = None if loop is None else loop.create_future()
        self.event: threading.Event | None = threading.Event() if loop is None else None
        self.granted = False
        self.ticket = 0

    def wake(self) -> None:
        if self.event is not None:
            self.event.set()
            return
        assert self.loop is not None and self.future is not None
        try:
            self.loop.call_soon_threadsafe(_resolve, self.future)
        except RuntimeError:  # that loop is closed; its task is gone with it
            pass


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():  # a cancelled waiter's future stays cancelled
        fut.set_result(None)


class InFlightLimit:
    """An adaptive bound on tries in flight; ``acquire`` returns a ticket for ``release``."""

    def __init__(self, *, adapt: bool = True) -> None:
        self.adapt = adapt
        self._lock = threading.Lock()
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._active = 0
        self._sent = 0  # tries started so far: a try's ticket is its number
        self._cut_at = 0  # tries numbered up to this one were sent before the last cut
        self._limit: float | None = None
        self._lowest: float | None = None
        self._throttled = 0
        self._cuts = 0
        self._waiting: deque[_Waiter] = deque()

    def _check_fork(self) -> None:
        if os.getpid() != self._pid:  # a forked child: the parent's waiters are not ours
            self._lock = threading.Lock()
            self._reset()

    def _room(self) -> bool:
        return self._limit is None or self._active < int(self._limit)

    def _take(self) -> int:
        self._active += 1
        self._sent += 1
        return self._sent

    def _try_take(self, loop: asyncio.AbstractEventLoop | None) -> tuple[int, _Waiter | None]:
        """A ticket now (``(ticket, None)``), or a place in the queue (``(0, waiter)``)."""
        with self._lock:
            self._check_fork()
            if not self._waiting and self._room():
                return self._take(), None
            waiter = _Waiter(loop)
            self._waiting.append(waiter)
            return 0, waiter

    def acquire_blocking(self) -> int:
        ticket, waiter = self._try_take(None)
        if waiter is None:
            return ticket
        assert waiter.event is not None
        try:
            waiter.event.wait()
        except BaseException:
            self._give_up(waiter)
            raise
        return waiter.ticket

    async def acquire(self) -> int:
        ticket, waiter = self._try_take(asyncio.get_running_loop())
        if waiter is None:
            return ticket
        assert waiter.future is not None
        try:
            await waiter.future
        except BaseException:
            self._give_up(waiter)
            raise
        return waiter.ticket

    def _give_up(self, waiter: _Waiter) -> None:
        """A waiter was cancelled or interrupted: leave the queue, or pass its slot on."""
        with self._lock:
            if waiter.granted:
                self._active -= 1
                self._wake_locked()
            else:
                self._waiting.remove(waiter)

    def release(self, ticket: int, *, throttled: bool = False) -> None:
        """Give the slot back; ``throttled``: the store answered this try "slow down"."""
        with self._lock:
            if os.getpid() != self._pid:
                return  # a ticket of the parent's, released in a forked child
            self._active -= 1
            if throttled:
                self._throttled += 1
                if self.adapt and ticket > self._cut_at:
                    sent_at = self._active + 1.0  # this try and those still in flight
                    if self._limit is not None:
                        sent_at = min(sent_at, self._limit)
                    self._limit = max(1.0, sent_at / 2.0)
                    self._lowest = (
                        self._limit if self._lowest is None else min(self._lowest, self._limit)
                    )
                    self._cut_at = self._sent
                    self._cuts += 1
            elif self._limit is not None:
                self._limit = min(_MAX_LIMIT, self._limit + 1.0 / self._limit)
            self._wake_locked()

    def _wake_locked(self) -> None:
        while self._waiting and self._room():
            waiter = self._waiting.popleft()
            waiter.granted = True
            waiter.ticket = self._take()
            waiter.wake()

    def stats(self) -> LimitStats:
        with self._lock:
            return LimitStats(self._throttled, self._cuts, self._limit, self._lowest)
