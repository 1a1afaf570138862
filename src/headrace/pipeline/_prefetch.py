"""The loader's read-ahead thread and the bounded queue between it and the consumer.

A :class:`Prefetcher` runs an iterator of chunks on a daemon thread and puts
each chunk on a queue of at most ``depth`` chunks; the consumer takes them with
:meth:`Prefetcher.get`. The producer always ends the queue with :data:`END` or
a :class:`Failure` (its error, handed over to be raised in the consumer's
thread); :meth:`Prefetcher.stop` ends it early and leaves :data:`STALE` for a
consumer still waiting, so that it raises instead of waiting for ever. Only
*when* chunks are read changes here, never what they hold.

The thread holds the chunks' iterator (and through it the loader) only while it
reads a chunk; while it waits for room in the queue it holds it weakly, and it
ends once the iterator is gone. A loader dropped without ``close()`` in a cycle
with its own iteration (a transform that is a trainer's method, the trainer
holding the iterator) was held by the thread, a root: never collected, its
thread waiting on the full queue and its source's files open for ever.

The queue is a :class:`Handoff`, not a :class:`queue.Queue`: the consumer waits
in it, where Ctrl-C (or a SIGTERM handler raising ``SystemExit``) lands, and an
exception raised inside ``Queue.get``'s ``Condition.wait`` could leave the
queue's lock held (the stop that follows then waited for it for ever) or
released twice (a ``RuntimeError`` in place of the interrupt): 17 of 80
SIGTERMs to a loop waiting for a stuck read, on a loaded 2-core machine.
"""

from __future__ import annotations

import queue
import threading
import time
import weakref
from collections import deque
from collections.abc import Iterator
from typing import Any

from headrace.errors import StateError
from headrace.io._waits import wake, wakeup
from headrace.pipeline._stall import StallWatch

__all__ = ["END", "STALE", "Failure", "Handoff", "Prefetcher", "stale_error"]

END = object()
STALE = object()  # put after a producer is stopped: its consumer must not wait on
NOTHING = object()  # what Handoff.take gives where no item came


class Failure:
    """The error that ended the producer, and the first step it did not hand over."""

    __slots__ = ("exc", "step")

    def __init__(self, exc: BaseException, step: int) -> None:
        self.exc = exc
        self.step = step


class Handoff:
    """A bounded FIFO between threads that no exception, wherever it is raised in it,
    leaves locked: no lock is ever held. Items go through a deque (``append`` and
    ``popleft`` are atomic), and two locks serve only as wake-ups
    (:mod:`headrace.io._waits`), always waited on with a timeout; a wake-up lost to an
    exception costs one more look at the deque.
    An exception between a get's ``popleft`` and its return loses that item: only a
    consumer that is abandoning the queue gets one there."""

    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self._items: deque[object] = deque()
        self._arrived = wakeup()  # released when an item is put
        self._taken = wakeup()  # released when one is taken

    def full(self) -> bool:
        return len(self._items) >= self.maxsize

    def put(self, item: object, timeout: float) -> bool:
        """Append ``item`` once there is room; ``False`` if there was none for ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while self.full():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self._taken.acquire(timeout=left)
        self.put_now(item)
        return True

    def put_now(self, item: object) -> None:
        """Append ``item`` even beyond ``maxsize``."""
        self._items.append(item)
        wake(self._arrived)

    def get(self, timeout: float = 0.0) -> object:
        """The first item, waiting up to ``timeout`` s for one (:class:`queue.Empty`)."""
        item = self.take(timeout)
        if item is NOTHING:
            raise queue.Empty
        return item

    def take(self, timeout: float = 0.0) -> object:
        """The first item, waiting up to ``timeout`` s for one; :data:`NOTHING` if none
        came. It waits outside any ``except``: a Ctrl-C landing in the wait was raised
        "during handling of" an ``IndexError`` (and the caller's ``queue.Empty``), two
        tracebacks of headrace's internals printed over the user's interrupt."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                item = self._items.popleft()
            except IndexError:
                item = NOTHING
            if item is not NOTHING:
                wake(self._taken)
                return item
            left = deadline - time.monotonic()
            if left <= 0:
                return NOTHING
            self._arrived.acquire(timeout=left)

    def clear(self) -> list[object]:
        """Drop every item (and wake a producer waiting for room); those dropped."""
        dropped = []
        while True:  # popleft, not clear(): an item put meanwhile is dropped, or kept
            try:
                dropped.append(self._items.popleft())
            except IndexError:
                break
        wake(self._taken)
        return dropped

    def snapshot(self) -> list[object]:
        """The items waiting now, left in place."""
        return list(self._items.copy())  # copy(): one step, never mutated while iterated


class Prefetcher:
    """Puts what ``chunks`` yields, ``(steps, item)`` pairs, on a queue of ``depth`` items.

    ``start`` is the first step, named by a :class:`Failure` before any chunk.
    Nothing runs until :meth:`start`. ``chunks`` (a generator: weakly referenceable) is
    held here, by its consumer's side; the thread holds it only while it reads
    (:func:`_produce`), and ends when it is gone.
    """

    def __init__(self, chunks: Iterator[tuple[list[int], Any]], start: int, depth: int) -> None:
        self.queue = Handoff(depth)
        self._stop = threading.Event()
        self._chunks = chunks
        # The read-ahead's error that stop() dropped from the queue, unconsumed: what the
        # consumer's stale error names (:meth:`unconsumed`).
        self.dropped: Failure | None = None
        self.thread = threading.Thread(
            target=_produce,
            args=(weakref.ref(chunks), self.queue, self._stop, start),
            name="headrace-prefetch",
            daemon=True,
        )

    def start(self) -> None:
        self.thread.start()

    def get(self, watch: StallWatch) -> tuple[object, float]:
        """The next item (a chunk's item, :data:`END`, :data:`STALE` or a :class:`Failure`),
        and how long the consumer waited for it (seconds); ``watch`` warns while it waits."""
        item = self.queue.take()
        if item is not NOTHING:
            return item, 0.0
        # The consumer is ahead of the read-ahead: it waits.
        t0 = time.perf_counter()
        watch.begin()
        arrived = False
        try:
            item = _wait_for(self.queue, self.thread, watch)
            arrived = item is not END and item is not STALE and not isinstance(item, Failure)
        finally:
            watch.end(arrived=arrived)
        return item, time.perf_counter() - t0

    def unconsumed(self) -> Failure | None:
        """The read-ahead's error that waited in the queue, not yet taken, when the
        consumer's iteration went stale: dropped by :meth:`stop`, or (a stop in another
        thread not there yet) still waiting."""
        if self.dropped is not None:
            return self.dropped
        return next((i for i in self.queue.snapshot() if isinstance(i, Failure)), None)

    def stop(self, timeout: float) -> bool:
        """Stop the producer thread; ``False`` if it is still inside a read after ``timeout``.

        Such a thread is left to finish that read in the background: it then sees
        the stop and drops its chunk.
        """
        self._stop.set()
        q = self.queue
        # Unblock a producer waiting on a full queue. An error it had put there is kept
        # for the consumer's stale error to name: dropped unsaid, a close() lost it.
        failed = [i for i in q.clear() if isinstance(i, Failure)]
        if failed and self.dropped is None:
            self.dropped = failed[0]
        try:
            self.thread.join(timeout=timeout)
        except RuntimeError:
            # Thread.start() was interrupted (Ctrl-C) before the thread ran; the stop
            # was set first, so if it runs at all it returns before reading. (Or the
            # garbage collector finalised a dropped iteration in this very thread.)
            pass
        # Wake a consumer still waiting on this queue, so it can raise. (A producer
        # that outlived the join drops what it reads once its read returns.)
        q.clear()
        q.put_now(STALE)
        return not self.thread.is_alive()


def _produce(
    chunks: weakref.ref[Iterator[tuple[list[int], Any]]],
    q: Handoff,
    stop: threading.Event,
    start: int,
) -> None:
    """The read-ahead thread: read ``chunks`` onto ``q`` until they end, ``stop`` is set or
    they are gone. Holds them (and the loader their generator holds) only inside a read;
    its last item, :data:`END` or a :class:`Failure` (whose traceback holds the loader),
    is put without waiting for room, and the thread ends then."""

    def put(item: object) -> bool:
        while not stop.is_set() and chunks() is not None:
            if q.put(item, timeout=0.05):
                return True
        return False

    if stop.is_set():  # stopped before it ran (see stop()): read nothing
        return
    step = start
    last: object = END
    try:
        while True:
            it = chunks()
            if it is None or stop.is_set():  # dropped (collected) or stopped: no more
                return
            chunk = next(it, None)
            del it  # held weakly again while it waits for room
            if chunk is None:
                break
            steps, item = chunk
            del chunk
            if not put(item):
                return
            step = steps[-1] + 1
    except BaseException as exc:  # handed to the consumer, who re-raises it
        last = Failure(exc, step)
    if not stop.is_set():
        q.put_now(last)


def _wait_for(q: Handoff, producer: threading.Thread, watch: StallWatch) -> object:
    """The next item of ``q``, or an error if its producer is gone without ending it.

    A producer always ends with ``END`` or a failure; one that is not alive with the
    queue empty did not run in this process: it was forked after the iteration began.
    """
    while True:
        item = q.take(timeout=min(0.5, watch.due_in()))
        if item is not NOTHING:
            return item
        watch.poll()
        if not producer.is_alive():
            # Its last item, put as it ended; or the STALE a new iteration puts once it
            # has stopped it (a moment after: give it that moment).
            item = q.take(timeout=1.0)
            if item is not NOTHING:
                return item
            raise StateError(
                "this iterator's read-ahead thread is not in this process (it forked after "
                "the iteration began): call iter(loader) again here, which reads on from "
                "the loader's step"
            )


def stale_error(*, closed: bool) -> StateError:
    """What a stale iterator raises (``closed``: its loader was closed)."""
    again = (
        "the loader is closed: make a new one (load_state_dict(loader.state_dict()) "
        "continues at its step)"
        if closed
        else "iterate the loader again (iter(loader))"
    )
    return StateError(
        "this iterator is stale: load_state_dict(), close() or a newer iter() on its "
        f"loader came after it began, so its next step would not follow the loader's "
        f"state; {again}"
    )
