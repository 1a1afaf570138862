"""Decompressed MDS shards held in memory, least recently used dropped past a bound.

A compressed shard is decompressed whole before any of its samples can be read
(docs/files.md). A batch's shards are asked for together; those neither held nor
being decompressed by another thread are loaded together by the caller's
``load`` (fetched side by side, decompressed on the I/O pool); a shard another
thread is loading is waited for, never decompressed twice.

The read-ahead (:mod:`._mds_ahead`) loads the next window's shards through the
same cache, marking the current window's as kept: the least recently used shard
not kept is dropped first, so a read-ahead sized to fit beside them never drops
one. A read-ahead that fails hands its waiters nothing: each loads the shard
again itself and raises its own error.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future

import numpy as np
from numpy.typing import NDArray

from headrace.io._memory import available_memory
from headrace.io._waits import result

__all__ = ["DEFAULT_SHARD_CACHE", "ShardCache", "default_cache_bytes"]

#: The most decompressed shards held by default: 2 GiB (Streaming's shards are
#: 64 MiB by default: 32 of them; two default windows of about 1 GiB), or two windows
#: where a window packs shards past 1 GiB; a quarter of the memory available at most.
DEFAULT_SHARD_CACHE = 2 << 30

Shard = NDArray[np.uint8]


def default_cache_bytes(two_windows: int = 0) -> int:
    """The default bound: :data:`DEFAULT_SHARD_CACHE`, or ``two_windows`` (the bytes of
    the two largest windows of the windowed shuffle) where more."""
    want = max(DEFAULT_SHARD_CACHE, two_windows)
    memory = available_memory()
    if memory is None:
        return want
    return max(1, min(want, memory.available // 4))


class ShardCache:
    """Decompressed shards by number, at most ``max_bytes`` of them held (a shard a
    batch needs is handed to it even when larger: it is then not kept)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.held_bytes = 0
        self._held: OrderedDict[int, Shard] = OrderedDict()
        self._loading: dict[int, Future[Shard | None]] = {}
        self._lock = threading.Lock()
        #: Shards dropped only when nothing else is left to drop (the current window's).
        self.keep: frozenset[int] = frozenset()
        #: Counts clears: a load begun before one (a read-ahead stuck in storage past its
        #: source's close) hands its shards to those waiting but leaves them unheld.
        self._clears = 0

    def held(self) -> list[int]:
        """The shards held, least recently used first."""
        with self._lock:
            return list(self._held)

    def missing(self, shards: list[int]) -> list[int]:
        """Those of ``shards`` neither held nor being loaded."""
        with self._lock:
            return [s for s in shards if s not in self._held and s not in self._loading]

    def get(
        self, shards: list[int], load: Callable[[list[int]], list[Shard]], ahead: bool = False
    ) -> dict[int, Shard]:
        """Each of ``shards``, held, loaded by another thread, or loaded by ``load``
        (``ahead``: a read-ahead's, whose failure its waiters do not raise)."""
        out: dict[int, Shard] = {}
        waits: dict[int, Future[Shard | None]] = {}
        mine: list[tuple[int, Future[Shard | None]]] = []
        with self._lock:
            clears = self._clears
            for s in shards:
                if s in self._held:
                    self._held.move_to_end(s)
                    out[s] = self._held[s]
                elif s in self._loading:
                    waits[s] = self._loading[s]
                else:
                    f: Future[Shard | None] = Future()
                    f.set_running_or_notify_cancel()
                    self._loading[s] = f
                    mine.append((s, f))
        if mine:
            try:
                got = load([s for s, _ in mine])
            except BaseException as exc:
                with self._lock:
                    for s, _ in mine:
                        del self._loading[s]
                for _, f in mine:
                    # Those waiting raise it too (a later get tries again); a read-ahead's
                    # waiters load the shard themselves (None), and raise their own error.
                    if ahead:
                        f.set_result(None)
                    else:
                        f.set_exception(exc)
                raise
            with self._lock:
                for (s, _), data in zip(mine, got, strict=True):
                    del self._loading[s]
                    out[s] = data
                    if clears == self._clears:
                        self._held[s] = data
                        self.held_bytes += data.nbytes
                while self.held_bytes > self.max_bytes and self._held:
                    drop = next((s for s in self._held if s not in self.keep), None)
                    if drop is None:
                        drop = next(iter(self._held))
                    self.held_bytes -= self._held.pop(drop).nbytes
            for (_, f), data in zip(mine, got, strict=True):
                f.set_result(data)
        again = []
        for s, w in waits.items():
            got_one = result(w)  # Ctrl-C while waiting leaves no lock held
            if got_one is None:
                again.append(s)
            else:
                out[s] = got_one
        if again:  # a read-ahead of them failed
            out.update(self.get(again, load))
        return out

    def clear(self) -> None:
        with self._lock:
            self._held.clear()
            self.held_bytes = 0
            self.keep = frozenset()
            self._clears += 1
