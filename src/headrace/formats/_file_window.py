"""A bounded read-ahead window of whole-file fetches, in plan order.

The window is given the order in which files will be needed (:meth:`plan`)
and keeps up to ``depth`` of them *held*: in flight, or fetched and not yet
released by the consumer. Held bytes are therefore at most ``depth`` times the
largest file, whatever the dataset's size, and a slow fetch never stalls the
ones behind it. Fetches run on a private pool of ``depth`` threads: the shared
I/O pool has 8, which would cap the depth that object stores need (64).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from headrace.errors import StateError
from headrace.io._daemon_pool import DaemonPool
from headrace.io._waits import result

__all__ = ["FetchWindow", "WindowStats"]


def _held(data: Any) -> int:
    """The bytes ``data`` holds: a sparse image (HDF5 by ranges) is the object's size,
    but holds only what it fetched (its ``nbytes``)."""
    held = getattr(data, "nbytes", None)
    return held if isinstance(held, int) else memoryview(data).nbytes


@dataclass(slots=True)
class WindowStats:
    """What a window did: fetches, bytes, and the most held and in flight at once; and
    what its source read from it: ``samples``, and ``sample_bytes``, the bytes those
    samples take in their files (each file's size over its count)."""

    fetches: int = 0
    bytes: int = 0
    held_bytes: int = 0
    peak_held_bytes: int = 0
    in_flight: int = 0
    max_in_flight_observed: int = 0
    samples: int = 0
    sample_bytes: int = 0

    @property
    def amplification(self) -> float:
        """Bytes fetched over the bytes the samples read take in their files: 1.0 reads
        each stored byte once; a whole file of 1,000 samples fetched for one is 1,000.
        Read-ahead for reads not made yet counts in ``bytes`` (0.0 before any sample)."""
        return self.bytes / self.sample_bytes if self.sample_bytes else 0.0


class _Entry:
    __slots__ = ("dropped", "fetching", "future", "nbytes")

    def __init__(self) -> None:
        self.future: Future[Any] = Future()
        self.dropped = False
        self.fetching = True  # until its fetch ends (set under the window's lock)
        self.nbytes = 0


class FetchWindow:
    """Fetch files by number, at most ``depth`` held at once, in the order planned."""

    def __init__(self, fetch: Callable[[int], Any], depth: int, *, name: str = "files") -> None:
        self._fetch = fetch
        self.depth = depth
        self._name = name
        self._lock = threading.Lock()
        self._entries: dict[int, _Entry] = {}
        self._queue: deque[int] = deque()
        # Fetches dropped while in flight: each keeps its slot until it ends, else a
        # plan that changed (a jump, a resume) started depth more beside them.
        self._orphans = 0
        self._pool: DaemonPool | None = None
        self.stats = WindowStats()

    # -- planning ---------------------------------------------------------------
    def plan(self, files: Iterable[int]) -> None:
        """Files will be taken in this order: queue those not yet held, start what fits."""
        with self._lock:
            seen = set(self._entries)
            q: deque[int] = deque()
            for f in files:
                if f not in seen:
                    seen.add(f)
                    q.append(f)
            self._queue = q
        self._pump()

    @property
    def queued(self) -> list[int]:
        """Files planned but not yet started."""
        with self._lock:
            return list(self._queue)

    def retain(self, keep: set[int]) -> None:
        """Drop held and queued files not in ``keep`` (a plan that changed, e.g. after a
        resume). Queued ones too: a dropped fetch that ends before the new plan is given
        starts the next queued file, which was the old plan's, held until the window
        closed (1 test run in 3 here)."""
        with self._lock:
            for f in [f for f in self._entries if f not in keep]:
                self._drop_locked(f)
            self._queue = deque(f for f in self._queue if f in keep)

    def _drop_locked(self, f: int) -> _Entry:
        e = self._entries.pop(f)
        e.dropped = True
        if e.fetching:
            self._orphans += 1
        # nbytes is set (under the lock) only once counted as held, which may
        # precede the future's result: subtract it whether or not that is out.
        self.stats.held_bytes -= e.nbytes
        e.nbytes = 0
        return e

    # -- fetching ---------------------------------------------------------------
    def _start_locked(self, f: int) -> _Entry:
        e = self._entries[f] = _Entry()
        if self._pool is None:
            # Daemon threads: a fetch stuck in a stalled mount never holds the exit.
            self._pool = DaemonPool(self.depth, thread_name_prefix=f"headrace-{self._name}")
        self._pool.submit(self._run, f, e)
        return e

    def _run(self, f: int, e: _Entry) -> None:
        s = self.stats
        with self._lock:
            s.in_flight += 1
            s.max_in_flight_observed = max(s.max_in_flight_observed, s.in_flight)
        try:
            data = self._fetch(f)
        except BaseException as exc:
            with self._lock:
                s.in_flight -= 1
                orphan = self._ended_locked(e)
            e.future.set_exception(exc)
        else:
            n = _held(data)
            with self._lock:
                s.in_flight -= 1
                if getattr(data, "fetched", True):  # (an NPZ's members kept: not fetched)
                    s.fetches += 1
                s.bytes += n
                orphan = self._ended_locked(e)
                if not e.dropped:
                    self._count_locked(e, n)
            e.future.set_result(data)
        if orphan:
            self._pump()
        # This frame outlives the call in a failed fetch's traceback, which the entry's
        # future holds: window -> entry -> future -> error -> frame -> window, a cycle that
        # kept a dropped source's threads until the cyclic collector ran (a fetch that
        # failed as its source went away, or any failure, under gc.disable()).
        del self, e

    def _ended_locked(self, e: _Entry) -> bool:
        """Note that ``e``'s fetch ended; whether it freed a dropped entry's slot."""
        e.fetching = False
        if e.dropped:
            self._orphans -= 1
            return True
        return False

    def _count_locked(self, e: _Entry, n: int) -> None:
        s = self.stats
        s.held_bytes += n - e.nbytes
        e.nbytes = n
        s.peak_held_bytes = max(s.peak_held_bytes, s.held_bytes)

    def recount(self, f: int) -> None:
        """Count file ``f``'s bytes again: a sparse image (HDF5 by ranges) grows when a
        later read of a held file fetches the chunks it lacks."""
        with self._lock:
            e = self._entries.get(f)
            if e is None or not e.future.done() or e.future.exception() is not None:
                return
            n = _held(e.future.result())
            # Fetched since it was counted: bytes too (they counted the first fetch only).
            self.stats.bytes += max(0, n - e.nbytes)
            self._count_locked(e, n)

    def _pump(self) -> None:
        with self._lock:
            while self._queue and len(self._entries) + self._orphans < self.depth:
                f = self._queue.popleft()
                if f not in self._entries:
                    self._start_locked(f)

    def held(self) -> set[int]:
        """The files held now: in flight, or fetched and not released."""
        with self._lock:
            return set(self._entries)

    def full_without(self, f: int) -> bool:
        """Whether taking ``f`` now would hold more than ``depth`` files."""
        with self._lock:
            return f not in self._entries and len(self._entries) + self._orphans >= self.depth

    def take(self, f: int) -> Any:
        """File ``f``'s bytes (waiting for its fetch; starting it if not started).

        The file stays held until :meth:`release`. A failed fetch is dropped, so
        asking again retries it.
        """
        with self._lock:
            e = self._entries.get(f)
            if e is None:
                if f in self._queue:
                    self._queue.remove(f)
                e = self._start_locked(f)
        try:
            return result(e.future)
        except BaseException:
            with self._lock:
                if self._entries.get(f) is e:
                    self._drop_locked(f)
            self._pump()
            raise

    def release(self, f: int) -> None:
        """Forget file ``f``'s bytes and start the next planned fetch."""
        with self._lock:
            if f in self._entries:
                self._drop_locked(f)
        self._pump()

    def close(self) -> None:
        """Drop everything and wait for fetches in flight; reusable afterwards."""
        with self._lock:
            self._queue.clear()
            dropped = {f: self._drop_locked(f) for f in list(self._entries)}
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            self._orphans = 0  # those cancelled before they ran never end
        # A cancelled fetch never resolves its future; a take() waiting on it
        # (from another thread) would wait forever.
        for f, e in dropped.items():
            if not e.future.done():
                e.future.set_exception(
                    StateError(f"{self._name} {f}: the window closed before it was fetched")
                )
