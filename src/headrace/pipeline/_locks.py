"""One read lock per source object.

Sources keep caches (token windows, decoded row groups, fetch windows) that
are not thread-safe. Whoever calls a source's ``read``, ``prefetch`` or
``close`` holds ``source_lock(source)``: every Loader over it (a re-iteration may start while
an old producer finishes a slow read; an eval loader may share the training
source) and every Mixture over it, so two threads never read one source at once.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

__all__ = ["source_lock"]

_LOCKS: weakref.WeakKeyDictionary[Any, threading.Lock] = weakref.WeakKeyDictionary()
_GUARD = threading.Lock()


def source_lock(source: object) -> threading.Lock:
    """The lock of ``source``, made on first use and dropped with the source.

    A source that cannot be weakly referenced or hashed gets a new lock per
    call: its callers are then not serialised with each other.
    """
    with _GUARD:
        try:
            lock = _LOCKS.get(source)
            if lock is None:
                lock = _LOCKS[source] = threading.Lock()
        except TypeError:
            lock = threading.Lock()
    return lock
