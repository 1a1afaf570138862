"""Compressed MDS shards fetched and decompressed in the background, ahead of their reads.

Under the windowed shuffle a window's first batch needs most of the window's
shards, each fetched whole and decompressed (about 1 GiB of shards a window by
default): without read-ahead every window switch waited for all of it. The
source's ``prefetch`` names the shards the next chunk and the next window need
(:meth:`ReadAhead.want`); one background thread loads those not held, a few at
a time, into the source's :class:`~._mds_cache.ShardCache`, where a read that
needs a shard being loaded waits for it (single-flight: never decompressed
twice). Only the latest request counts: a newer one replaces what is left of the
older. A load that fails is dropped here: the read that needs the shard loads it
again and raises its own error.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future

import numpy as np
from numpy.typing import NDArray

from headrace.formats._mds_cache import Shard, ShardCache
from headrace.formats._row_plan import RowWindows
from headrace.io._daemon_pool import DaemonPool
from headrace.io._waits import result

__all__ = ["AHEAD_GROUP", "CLOSE_WAIT_S", "ReadAhead", "plan_ahead"]

#: Shards a background load takes at once (fetched side by side, decompressed on the
#: I/O pool): a read waits for the group its shard is in, and close() for one group.
AHEAD_GROUP = 4
#: How long close() waits for a load in progress (the loader's wait for a read, too).
CLOSE_WAIT_S = 1.0


class ReadAhead:
    """Shards loaded into ``cache`` by ``load`` on a background thread, as asked."""

    def __init__(
        self,
        cache: ShardCache,
        load: Callable[[list[int]], list[Shard]],
        count: Callable[[int, bool], None],
    ) -> None:
        self._cache = cache
        self._load = load
        self._count = count  # (shards, loaded): each group loaded here, or failed
        self._lock = threading.Lock()
        self._todo: list[int] = []
        self._job: Future[None] | None = None
        self._pool: DaemonPool | None = None
        self._stopped = False
        self._generation = 0  # a job of an older one (before a stop) starts nothing more

    def want(self, shards: list[int]) -> None:
        """Load ``shards`` (in this order; those held or being loaded are skipped) in the
        background, instead of what is left of an earlier request."""
        with self._lock:
            if self._stopped:
                return
            self._todo = list(shards)
            if shards and self._job is None:
                if self._pool is None:
                    self._pool = DaemonPool(1, thread_name_prefix="headrace-mds-ahead")
                self._job = self._pool.submit(self._run, self._generation)

    def _run(self, generation: int) -> None:
        while True:
            with self._lock:
                current = generation == self._generation
                group = self._cache.missing(self._todo)[:AHEAD_GROUP] if current else []
                if not group:
                    if current:
                        self._job = None
                    return
                self._todo = [s for s in self._todo if s not in group]
            try:
                self._cache.get(group, self._load, ahead=True)
            except Exception:  # the read that needs them loads them and raises its own error
                self._count(len(group), False)
            else:
                self._count(len(group), True)

    def wait(self) -> None:
        """Wait until nothing is being loaded here."""
        with self._lock:
            job = self._job
        if job is not None:
            result(job)

    def stop(self) -> None:
        """Start nothing more: the group being loaded is finished (or fails)."""
        with self._lock:
            self._stopped = True
            self._todo = []
            self._generation += 1
            self._job = None

    def close(self) -> None:
        """:meth:`stop`, and wait up to :data:`CLOSE_WAIT_S` for the group being loaded
        and the thread to end; a load stuck in storage (a stalled mount) is left to end
        on its daemon thread, as the loader leaves a stuck read. A later :meth:`want`
        starts another thread (a source reopened after close())."""
        self.stop()
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, timeout=CLOSE_WAIT_S)
        with self._lock:
            self._stopped = False


def plan_ahead(
    windows: RowWindows,
    seed: int,
    samples: NDArray[np.int64],
    share: tuple[float, float] | None,
    shards: tuple[NDArray[np.int64], frozenset[int], list[int]],
    max_bytes: int,
) -> tuple[list[int], list[int]]:
    """``(keep, want)``: the compressed shards of the windows ``samples`` lie in, and
    those to load: them, then the window's after the last sample's, as far as they fit
    ``max_bytes`` beside them (nothing where they alone do not fit). ``shards``: each
    shard's first row, the compressed ones, and each one's decompressed size. With
    ``share``, each window's stretch that this host's samples lie in
    (:meth:`RowWindows.stretch`), else all of it."""
    starts, zipped, raw = shards

    def of(w: int) -> list[int]:
        lo, hi = windows.stretch(w, share)
        first, last = np.searchsorted(starts, [lo, hi - 1], side="right") - 1
        return [s for s in range(int(first), int(last) + 1) if s in zipped]

    now = [s for w in np.unique(windows.layout.window_of(seed, samples)).tolist() for s in of(w)]
    room = max_bytes - sum(raw[s] for s in now)
    if room < 0:  # loading them ahead would drop some of them to make room for others
        return now, []
    want = list(now)
    for s in of(windows.next_window(seed, int(samples.max()))):
        if s in want:
            continue
        room -= raw[s]
        if room < 0:
            break
        want.append(s)
    return now, want
