"""Coroutines run on a private event loop, a bounded number at once, for callers on threads.

Object-store reads are cheap to keep in flight (obstore's Tokio runtime does
the work; the loop only awaits), but a thread pool would need one thread per
request in flight. A :class:`RequestQueue` takes any number of submissions from
any thread, runs at most ``max_in_flight`` of them at a time on one loop
thread, in submission order, and hands back :class:`concurrent.futures.Future`
s, so callers wait on them as they do on the I/O pool's.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar

from headrace.errors import StorageError
from headrace.io._loop import LoopThread
from headrace.io._ranges import at_least
from headrace.io._waits import result

__all__ = ["QueueStats", "RequestQueue"]

T = TypeVar("T")


@dataclass(slots=True)
class QueueStats:
    """Requests submitted, finished (either way), in flight now and at most at once."""

    submitted: int = 0
    finished: int = 0
    in_flight: int = 0
    max_in_flight_observed: int = 0


class RequestQueue:
    """Run submitted coroutines on a private loop thread, at most ``max_in_flight`` at once.

    Started on first submit; after ``fork`` a child starts its own loop (the
    parent's thread does not exist there). :meth:`close` joins the thread;
    requests still waiting or running are cancelled.
    """

    def __init__(self, max_in_flight: int, *, name: str = "headrace-requests") -> None:
        self.max_in_flight = at_least("max_in_flight", max_in_flight, 1)
        self._name = name
        self._lock = threading.Lock()
        self._loop: LoopThread | None = None
        # One semaphore per loop: an asyncio primitive is bound to the loop it first waits on.
        self._gate: tuple[LoopThread, asyncio.Semaphore] | None = None
        self._closed = False
        self.stats = QueueStats()

    def _loop_thread(self) -> LoopThread:
        with self._lock:
            if self._closed:
                raise StorageError(f"{self._name}: the request queue is closed")
            if self._loop is None or not self._loop.usable:
                self._loop = LoopThread(self._name)
                self._loop.stop_with(self)
            return self._loop

    def submit(self, job: Callable[[], Awaitable[T]]) -> Future[T]:
        """Start ``job()`` when fewer than ``max_in_flight`` run; its result as a future."""
        loop = self._loop_thread()
        with self._lock:
            self.stats.submitted += 1
        try:
            return loop.submit(self._run(loop, job))
        except RuntimeError as exc:  # close() stopped the loop since _loop_thread() returned
            if not self._closed:
                raise
            raise StorageError(f"{self._name}: the request queue is closed") from exc

    async def _run(self, loop: LoopThread, job: Callable[[], Awaitable[T]]) -> T:
        gate = self._gate
        if gate is None or gate[0] is not loop:
            gate = self._gate = (loop, asyncio.Semaphore(self.max_in_flight))
        try:
            async with gate[1]:
                with self._lock:
                    s = self.stats
                    s.in_flight += 1
                    s.max_in_flight_observed = max(s.max_in_flight_observed, s.in_flight)
                try:
                    return await job()
                finally:
                    with self._lock:
                        self.stats.in_flight -= 1
        finally:
            with self._lock:
                self.stats.finished += 1

    @contextmanager
    def slot(self) -> Iterator[None]:
        """Hold one of the ``max_in_flight`` places while the ``with`` block runs: a
        request the calling thread makes another way (a blocking GET) counts against
        the same bound as the coroutines, waiting its turn among them.

        A source that fetched some files whole (on its threads) and others by ranges
        (on this queue) had both in flight at once: up to twice ``in_flight``.
        """
        if self._loop_thread().inline:
            # Requests run one at a time in their callers' threads (an exit handler on
            # Python 3.12): a place held by a coroutine waiting for the block's end would
            # hold the caller's thread for ever, as hold() below does on such a loop.
            yield
            return
        admitted: Future[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = Future()

        async def hold() -> None:
            leave = asyncio.Event()
            admitted.set_result((asyncio.get_running_loop(), leave))
            await leave.wait()

        held = self.submit(hold)

        def refused(_: Future[None]) -> None:  # closed (cancelled) before it was admitted
            if not admitted.done():
                admitted.set_exception(
                    StorageError(f"{self._name}: the request queue closed while waiting")
                )

        held.add_done_callback(refused)
        loop, leave = result(admitted)
        try:
            if self._closed:
                # Admitted by close() itself: cancelling the request that held the place
                # freed it for this one a moment before this one's turn to be cancelled.
                raise StorageError(f"{self._name}: the request queue closed while waiting")
            yield
        finally:
            try:
                loop.call_soon_threadsafe(leave.set)
            except RuntimeError:  # the loop closed meanwhile: the place went with it
                pass

    def close(self) -> None:
        """Stop the loop thread (cancelling what is left). Idempotent."""
        with self._lock:
            self._closed = True
            loop, self._loop = self._loop, None
            self._gate = None
        if loop is not None:
            loop.close()
