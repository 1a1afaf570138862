"""A request queue and a local range reader made on first use, for sources that may
never read an object or a local file."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from headrace.io import RangeReader, RequestQueue, Strategy

__all__ = ["LazyQueue", "LazyReader"]


class LazyQueue:
    """A :class:`~headrace.io.RequestQueue` of ``in_flight`` named ``name``, made by the
    first :meth:`get`; :meth:`close` closes it, and a later :meth:`get` makes another
    (a source reopened after ``close()`` reads on)."""

    __slots__ = ("_in_flight", "_lock", "_name", "_queue")

    def __init__(self, in_flight: int, name: str) -> None:
        self._in_flight = in_flight
        self._name = name
        self._lock = threading.Lock()
        self._queue: RequestQueue | None = None

    def get(self) -> RequestQueue:
        from headrace.io import RequestQueue

        with self._lock:
            if self._queue is None:
                self._queue = RequestQueue(self._in_flight, name=self._name)
            return self._queue

    def close(self) -> None:
        with self._lock:
            queue, self._queue = self._queue, None
        if queue is not None:
            queue.close()


class LazyReader:
    """A :class:`~headrace.io.RangeReader` of ``strategy``, made by the first :meth:`get`;
    :meth:`close` closes it, and a later :meth:`get` makes another."""

    __slots__ = ("_lock", "_reader", "_strategy")

    def __init__(self, strategy: Strategy) -> None:
        self._strategy = strategy
        self._lock = threading.Lock()
        self._reader: RangeReader | None = None

    def get(self) -> RangeReader:
        from headrace.io import RangeReader, ReaderConfig

        with self._lock:
            if self._reader is None:
                self._reader = RangeReader(ReaderConfig(strategy=self._strategy))
            return self._reader

    def close(self) -> None:
        with self._lock:
            reader, self._reader = self._reader, None
        if reader is not None:
            reader.close()
