"""Waits that an exception raised inside them (Ctrl-C, a SIGTERM handler's
``SystemExit``) never leaves locked.

A signal handler runs in the main thread between two bytecodes, so its exception
can come out of any Python-level line the thread runs, inside the standard
library's synchronisation too: ``threading.Condition`` (under ``queue.Queue``,
``Event.wait``, ``Future.result``, ``concurrent.futures.wait``) takes its lock in a
Python ``__enter__`` or loop, and an exception raised just after the lock was
taken leaves it held for ever. The main thread is where a training loop (or a
notebook cell) waits for its batch; a future's lock left held there stops the
pool thread that sets its result, for ever, and the next wait on it too.

Here the waiting thread holds no lock: a future's completion releases a
*wake-up* lock (from a done callback, in the thread that completes it), which
the waiter takes with a timeout and only to sleep on; a wake-up lost to an
exception costs one more look. :class:`~headrace.pipeline._prefetch.Handoff`
is the read-ahead's queue built the same way.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from concurrent.futures import Future
from typing import Any, TypeVar

__all__ = ["result", "wait_done", "wait_any", "wake", "wakeup"]

T = TypeVar("T")

#: How long a waiter sleeps on its wake-up before looking again (it is woken sooner
#: when a future completes; this bounds the cost of a lost wake-up).
LOOK_S = 0.5
#: How often a waiter looks whether a pool has dropped the cancelled futures it waits on.
DROP_LOOK_S = 0.002


def wakeup() -> threading.Lock:
    """A wake-up: a lock taken already, released by :func:`wake`."""
    lock = threading.Lock()
    lock.acquire()
    return lock


def wake(lock: threading.Lock) -> None:
    """Release ``lock`` unless it is released already (a wake-up is pending)."""
    try:
        lock.release()
    except RuntimeError:
        pass


def wait_done(futures: Iterable[Future[Any]]) -> None:
    """Return once every future is done (finished, failed or cancelled), as
    ``concurrent.futures.wait(futures)`` does, holding no lock while it waits.

    As there, a cancelled future counts once its pool has dropped it (a thread took
    it off the queue): until then the queued call still holds what it was given (a
    window's buffer, a file's map and descriptor)."""
    _wait(list(futures), need_all=True)


def wait_any(futures: Iterable[Future[Any]]) -> None:
    """Return once one of ``futures`` is done (at once if there are none)."""
    _wait(list(futures), need_all=False)


def result(future: Future[T]) -> T:
    """``future.result()``, waited for by :func:`wait_done`."""
    _wait([future], need_all=True)
    try:
        return future.result()
    finally:
        # A failure's traceback holds this frame, which held the future holding the
        # failure: a cycle that kept a dropped store (its connections, its loop thread)
        # until the collector ran (a missing sidecar's 404, looked for by each source).
        del future


def _wait(futures: list[Future[Any]], *, need_all: bool) -> None:
    if not futures:
        return
    done: list[None] = []  # one item per completed future (list.append is atomic)
    lock = wakeup()

    def finished(_: Future[Any]) -> None:
        done.append(None)
        wake(lock)

    for f in futures:
        f.add_done_callback(finished)  # called at once for a done one
    need = len(futures) if need_all else 1
    while len(done) < need:
        lock.acquire(timeout=LOOK_S)
    # Dropping a cancelled future calls no callback: look again until each is dropped.
    while need_all and any(getattr(f, "_state", None) == "CANCELLED" for f in futures):
        time.sleep(DROP_LOOK_S)
