"""Running a batch of reads with a bounded number in flight.

Each batch runs ``depth`` worker loops that pull the next read from a shared
counter, rather than one future per read: a future costs tens of
microseconds of Python, as much as a 4 KiB read from NVMe, and on a
two-core machine that overhead alone caps the queue depth a pool can reach.

The calling thread runs one of the loops itself. Loops still queued when the
caller's loop runs dry are cancelled, so a reader called from inside a
saturated pool never waits on work that cannot start (no deadlock), and a
batch never needs more than the caller to make progress.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future
from typing import TypeVar

from headrace.io._waits import wait_done

__all__ = ["SAME_BATCH", "raise_first", "raise_lowest", "results", "run_batch"]

T = TypeVar("T")


def run_batch(n: int, read: Callable[[int], None], *, depth: int, pool: Executor | None) -> None:
    """Call ``read(i)`` for ``i in range(n)``, up to ``depth`` at a time.

    When a read fails no new read starts; every read already running
    finishes; then the first failure (lowest ``i``) is raised with a note
    saying how many others failed. Nothing is left running on return.
    """
    if n <= 0:
        return
    depth = min(depth, n)
    if depth <= 1 or pool is None:
        for i in range(n):
            read(i)
        return
    counter = itertools.count()
    errors: list[tuple[int, BaseException]] = []
    stop = False

    active: list[None] = []  # an item per loop running (append and pop are atomic)

    def loop() -> None:
        nonlocal stop
        while not stop:
            i = next(counter)  # itertools.count is atomic under the GIL
            if i >= n:
                return
            try:
                read(i)
            except BaseException as exc:  # re-raised below, after the others
                errors.append((i, exc))
                stop = True
                return

    def pooled() -> None:
        # Counted (a pool thread, which no Ctrl-C reaches) before it looks at stop: see
        # the wait below. The caller's own loop is not: an interrupt between its count
        # and its try left the count up, and the wait spun for ever.
        active.append(None)
        try:
            loop()
        finally:
            active.pop()

    futures: list[Future[None]] = []
    try:
        for _ in range(depth - 1):
            try:
                futures.append(pool.submit(pooled))
            except RuntimeError:
                # No thread for another loop ("can't start new thread" at the process's
                # limit, a pool shut down at exit): raised from here, it left the loops
                # submitted reading on into a buffer the caller had dropped. Those, and
                # the caller's own, read the rest.
                break
        loop()
    except BaseException:
        # A Ctrl-C out of a submit (Thread.start waits for the new thread) or between
        # two reads: no new read starts. Until 2026-12-07 the loops submitted read on
        # through the batch after the caller had gone, through a file it had unpinned.
        stop = True
        raise
    finally:
        # cancel() succeeds only for loops not yet started. Wait for the rest
        # alone: wait() never counts a cancelled future as done until a pool
        # thread dequeues it, which in a saturated pool may be never.
        wait_done([f for f in futures if not f.cancel()])
        # A submit cut short returned no future, but may have queued its loop: wait
        # for it if it runs (one that starts later finds stop set and reads nothing).
        while active:
            time.sleep(0.001)
    raise_lowest(errors)


#: The note on a batch's first failure when others failed too.
SAME_BATCH = "other read(s) of the same batch also failed."


def raise_first(errors: Sequence[BaseException], others: str = SAME_BATCH) -> None:
    """Raise ``errors[0]`` (nothing if there are none), noted ``"<n> <others>"`` when
    more than one failed: work done side by side, reported as if done in turn. A
    Ctrl-C or exit (not an ``Exception``) among them goes first: raised in the caller's
    part of the work, it was lost behind an earlier part's failure."""
    if not errors:
        return
    first = next((e for e in errors if not isinstance(e, Exception)), errors[0])
    if len(errors) > 1:
        first.add_note(f"{len(errors) - 1} {others}")
    raise first


def raise_lowest(errors: list[tuple[int, BaseException]]) -> None:
    """:func:`raise_first` of the failures of a batch's reads, by read index."""
    raise_first([exc for _, exc in sorted(errors, key=lambda e: e[0])])


def results(futures: Sequence[Future[T]], others: str = SAME_BATCH) -> list[T]:
    """Each future's result, in order, once every one is done; a failure (the first
    in order) is raised by :func:`raise_first`."""
    wait_done(futures)
    raise_first([exc for f in futures if (exc := f.exception()) is not None], others)
    return [f.result() for f in futures]
