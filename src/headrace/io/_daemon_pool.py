"""An executor whose threads never hold the interpreter's exit: reads stuck in storage.

``ThreadPoolExecutor`` joins its threads when the interpreter exits (and lets
each finish the work still queued). A thread inside a read of a mount whose
server stopped answering (a hung NFS or FUSE server) stays in the kernel until
the storage answers, so a script that had closed its loader and returned, or a
Ctrl-C, left a process that would not end: measured, it ended only when the
stalled mount was resumed. The process-wide I/O pools run on these daemon
threads instead; the exit abandons their work as it does any daemon thread's.
Work that must finish before exit is waited for by whoever submitted it
(``close()`` drains its reads; the object stores settle theirs,
:mod:`headrace.io._exit`).

Same contract otherwise: futures, ``map``, ``shutdown(wait, cancel_futures)``;
threads start on demand up to ``max_workers`` and are reused when idle.

:func:`one_call_pool` is one for the length of a call (counting files' samples,
opening token files, walking Arrow headers), which a ``with ThreadPoolExecutor``
was: its ``__exit__`` joined the threads, so a Ctrl-C while one read was stuck
waited for the storage, and so did the exit.
"""

from __future__ import annotations

import queue
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future
from contextlib import contextmanager
from typing import Any, ParamSpec, TypeVar

__all__ = ["DaemonPool", "one_call_pool"]

P = ParamSpec("P")
T = TypeVar("T")

_Item = tuple[Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]]


class DaemonPool(Executor):
    """Up to ``max_workers`` daemon threads named ``{thread_name_prefix}_{i}``."""

    def __init__(self, max_workers: int, thread_name_prefix: str) -> None:
        self._max_workers = max_workers
        self._prefix = thread_name_prefix
        self._work: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._shut = False
        # Dropped without shutdown(): its threads end (they hold the queue, not the pool).
        weakref.finalize(self, self._work.put, None)

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        with self._lock:
            if self._shut:
                raise RuntimeError("cannot schedule new futures after shutdown")
            future: Future[T] = Future()
            self._work.put((future, fn, args, kwargs))
            if not self._idle.acquire(blocking=False) and len(self._threads) < self._max_workers:
                t = threading.Thread(
                    target=_work,
                    args=(self._work, self._idle),
                    name=f"{self._prefix}_{len(self._threads)}",
                    daemon=True,
                )
                # Counted before it starts: start() waits for the new thread to run, and
                # a Ctrl-C landing there left a running thread uncounted, one past the
                # bound per interrupt, that shutdown() did not join.
                self._threads.append(t)
                try:
                    t.start()
                except Exception:  # no thread ("can't start new thread"): not counted
                    self._threads.remove(t)
                    raise
            return future

    def shutdown(
        self, wait: bool = True, *, cancel_futures: bool = False, timeout: float | None = None
    ) -> None:
        """As ``Executor.shutdown``; ``timeout``: wait at most this long for the threads
        (a task stuck in storage past it is left to end on its daemon thread)."""
        with self._lock:
            self._shut = True
            if cancel_futures:
                kept: list[_Item | None] = []
                while True:
                    try:
                        item = self._work.get_nowait()
                    except queue.Empty:
                        break
                    if item is None:
                        kept.append(item)
                    else:
                        item[0].cancel()
                for item in kept:
                    self._work.put(item)
            self._work.put(None)  # each thread passes it on to the next, and ends
        if wait:
            end = None if timeout is None else time.monotonic() + timeout
            for t in self._threads:
                if t.ident is None:  # a start cut short by a Ctrl-C: nothing to join yet
                    continue
                t.join(None if end is None else max(0.0, end - time.monotonic()))


@contextmanager
def one_call_pool(max_workers: int, thread_name_prefix: str) -> Iterator[DaemonPool]:
    """A :class:`DaemonPool` for one ``with`` block, whose caller waits for the results
    it needs. Left normally, the threads are joined (their work is done). Left by an
    error (a Ctrl-C, a failure elsewhere), work not started is cancelled and tasks
    still running are not waited for: one stuck in stalled storage stays on its daemon
    thread, holding neither the caller nor the exit; its result is dropped."""
    pool = DaemonPool(max_workers, thread_name_prefix)
    try:
        yield pool
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


def _work(work: queue.SimpleQueue[_Item | None], idle: threading.Semaphore) -> None:
    while True:
        item = work.get()
        if item is None:
            work.put(None)
            return
        future, fn, args, kwargs = item
        del item
        if future.set_running_or_notify_cancel():
            try:
                result = fn(*args, **kwargs)
            except BaseException as exc:
                future.set_exception(exc)
            else:
                future.set_result(result)
                del result
        # Nothing of the task outlives it here (a result or error held by this frame
        # would keep buffers, files or maps alive until the next task).
        del future, fn, args, kwargs
        idle.release()
