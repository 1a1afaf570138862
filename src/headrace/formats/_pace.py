"""Storage round trips one after another while they are quick, many at a time once
they are slow: where a run of stats, opens, folder listings or a batch's shard reads
goes is decided by what the first ones cost, never what they return.

On a page-cache-warm local disk a stat or a small read takes microseconds, and
threads handing the GIL round over them made a listing 2.7x slower and a local MDS
read 2x slower; on a network mount each waits a round trip (~1 ms), and one after
another they took minutes (ImageNet's 1.28 million stats: 21).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, Future
from typing import Any, TypeVar

from headrace.io import deep_io_pool, deep_io_threads

__all__ = ["Pace", "pooled", "quick_then_pooled"]

#: Items a task holds at most; tasks ahead at once on the pool.
_BATCH = 32
_AHEAD = 256

T = TypeVar("T")
R = TypeVar("R")


def quick_then_pooled(fn: Callable[[T], R], items: Sequence[T], slow_s: float) -> Iterator[R]:
    """``fn`` of each of ``items``, in order: one after another in this thread while they
    take under ``slow_s`` each, and once 4 in a row take longer, the rest many at a
    time on the deep I/O pool (:func:`pooled`). What a storage round trip (a stat, an
    open) costs decides where they run, not what they return; the first error in
    ``items``' order is raised, as calls one after another would."""
    return Pace(slow_s, confirm=4).map(fn, items)


class Pace:
    """Where a run of storage round trips goes (:func:`quick_then_pooled`): one after
    another in this thread while they are quick, many at a time on ``pool`` (default:
    the deep I/O pool) once ``confirm`` in a row have each taken longer than ``slow_s``
    (plus ``allow`` of its result: the time its size accounts for), and from then on,
    over every later :meth:`map` (a walk's next level of folders, a source's next
    read), until a map's quickest item is quick again (``recover``: the page cache has
    the data now).

    An item at a time, not a batch's average: on a mount 5 ms away the first two shard
    reads say so, not a batch of 4 (the first batch waited 0.077 s, side by side from
    the start 0.035); and ``confirm`` in a row, so that one hiccup (a page fault storm,
    a pause) does not send a local disk's reads to threads (one did, after 291 reads)."""

    def __init__(
        self,
        slow_s: float,
        allow: Callable[[Any], float] | None = None,
        confirm: int = 2,
        pool: Callable[[], Executor] = deep_io_pool,
        recover: bool = False,
    ) -> None:
        self.slow_s = slow_s
        self.allow = allow
        self.confirm = confirm
        self.pool = pool
        self.recover = recover
        self.slow = False

    def _over(self, took: float, got: Any) -> bool:
        """Whether an item that ``took`` seconds and gave ``got`` was slow."""
        return took > self.slow_s and (self.allow is None or took > self.slow_s + self.allow(got))

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> Iterator[R]:
        """``fn`` of each of ``items``, in order; the first error in that order raised."""
        lo, run, clock, slow_s = 0, 0, time.perf_counter, self.slow_s
        while lo < len(items) and not self.slow:
            # A list a piece, handed on at once (a yield an item cost a listing of
            # 256,000 files 80 ms more), each item timed.
            done: list[R] = []
            t0 = clock()
            for x in items[lo : lo + _BATCH]:
                done.append(got := fn(x))
                t1 = clock()
                run = run + 1 if t1 - t0 > slow_s and self._over(t1 - t0, got) else 0
                t0 = t1
                if run >= self.confirm:
                    self.slow = True
                    break
            yield from done
            lo += len(done)
        if lo >= len(items):
            return
        if not self.recover:
            yield from pooled(fn, items, lo, self.pool())
            return
        quickest = [float("inf")]

        def timed(x: T) -> R:
            t0 = time.perf_counter()
            got = fn(x)
            if not self._over(took := time.perf_counter() - t0, got):
                quickest[0] = min(quickest[0], took)
            return got

        yield from pooled(timed, items, lo, self.pool())
        self.slow = quickest[0] == float("inf")  # none was quick: still slow


def pooled(
    fn: Callable[[T], R], items: Sequence[T], lo: int = 0, pool: Executor | None = None
) -> Iterator[R]:
    """``fn`` of each of ``items[lo:]``, in order, on ``pool`` (the deep I/O pool by
    default): a batch a task, up to ``_AHEAD`` tasks ahead; batches of ``_BATCH``, or
    fewer, so that a short list still keeps every thread busy (96 files in batches of
    32 were 3 stats in flight)."""
    pool = deep_io_pool() if pool is None else pool
    step = max(1, min(_BATCH, -(-(len(items) - lo) // deep_io_threads())))

    def batch(at: int) -> list[R]:
        return [fn(x) for x in items[at : at + step]]

    ahead: deque[Future[list[R]]] = deque()
    try:
        for at in range(lo, len(items), step):
            ahead.append(pool.submit(batch, at))
            if len(ahead) >= _AHEAD:
                yield from ahead.popleft().result()
        while ahead:
            yield from ahead.popleft().result()
    finally:
        for f in ahead:  # an error (or a caller that stopped): the rest is not needed
            f.cancel()
