"""One read lock per source object, and what a forked child does with a parent's source.

Sources keep caches (token windows, decoded row groups, fetch windows) that
are not thread-safe. Whoever calls a source's ``read``, ``prefetch`` or
``close`` holds ``source_lock(source)``: every Loader over it (a re-iteration may start while
an old producer finishes a slow read; an eval loader may share the training
source) and every Mixture over it, so two threads never read one source at once.

A process that forks while a source is being read (a stock ``DataLoader``
starting ``fork`` workers while a loader in the main process reads ahead)
leaves the child a lock held by a thread it does not have, and reads in
flight on a pool it does not have either: the child waited for ever. So a lock
belongs to the process that made it: the first use of a source in a forked
child makes it a new lock and renews the source as a worker copy would be
made (a pickle round trip: each source's ``__getstate__`` drops its windows,
pending reads, stores and threads, and keeps what plans and reopens).
"""

from __future__ import annotations

import os
import pickle
import threading
import weakref
from typing import Any

__all__ = ["source_lock"]

_LOCKS: weakref.WeakKeyDictionary[Any, tuple[threading.Lock, int]] = weakref.WeakKeyDictionary()
_GUARD = threading.Lock()


def _after_fork_in_child() -> None:
    global _GUARD
    _GUARD = threading.Lock()  # a parent's thread may have held it at the fork


os.register_at_fork(after_in_child=_after_fork_in_child)


def source_lock(source: object) -> threading.Lock:
    """The lock of ``source`` in this process, made on first use and dropped with it.

    A source that cannot be weakly referenced or hashed gets a new lock per
    call: its callers are then not serialised with each other.
    """
    pid = os.getpid()
    with _GUARD:
        try:
            entry = _LOCKS.get(source)
            if entry is not None and entry[1] == pid:
                return entry[0]
            lock = threading.Lock()
            _LOCKS[source] = (lock, pid)
        except TypeError:
            return threading.Lock()
    if entry is not None:  # made in the process this one was forked from
        _renew(source)
    return lock


def _renew(source: Any) -> None:
    """Make ``source`` what a worker process receives: no windows, reads or threads.

    A source with ``__setstate__`` is set up again in place, from its pickled state: its
    parts may call back through a weak reference to it (a ``FileSource``'s fetch window),
    which, moved over from a copy, named the copy, gone at once (``ReferenceError`` at
    the first read of a stock ``DataLoader``'s forked worker, until 2026-12-07)."""
    setstate = getattr(source, "__setstate__", None)
    if setstate is not None and hasattr(source, "__dict__"):
        try:
            state = pickle.loads(pickle.dumps(source.__getstate__()))
        except Exception:
            return
        source.__dict__.clear()
        setstate(state)
        return
    try:
        fresh = pickle.loads(pickle.dumps(source))
    except Exception:
        return
    state = getattr(fresh, "__dict__", None)
    if state is not None:
        source.__dict__.clear()
        source.__dict__.update(state)
