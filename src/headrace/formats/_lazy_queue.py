"""A request queue made on first use, for readers that may never read an object."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from headrace.io import RequestQueue

__all__ = ["LazyQueue"]


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
