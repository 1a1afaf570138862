"""Python's cyclic garbage collector paused while a listing builds its many objects.

A listing of 100,000 keys makes a few hundred thousand tuples, each a container the
collector tracks: every 700 new ones start a collection, and as they pile up, full
ones that walk all of them again. That was 0.31-0.36 s of a ``FileSource``'s 1.06-1.18 s
open of such an ``s3://`` prefix (2 cores, 2026-12-06), for no garbage: a listing's
objects are kept. :func:`gc_paused` turns the collector off for the listing and back
on after, as it found it.

The collector is the process's, so pauses are shared: the first one in (of any
thread) turns it off if it was on, the last one out turns it back on. A process forked
during a pause (a ``DataLoader`` worker, say) gets it back on at once, as it was before
the pause; the pause it inherited ends for it there. A ``gc.disable()`` of the program's
own made during a pause is undone at its end.
"""

from __future__ import annotations

import gc
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["gc_paused"]

_lock = threading.Lock()
_pauses = 0  # pauses running in this process
_resume = False  # whether the collector was on when the first of them began
_forks = 0  # forks since this process began (a pause begun before one is not ended by it)


@contextmanager
def gc_paused() -> Iterator[None]:
    """The collector off inside (if it was on), back as it was after."""
    global _pauses, _resume
    with _lock:
        if _pauses == 0:
            _resume = gc.isenabled()
            gc.disable()
        _pauses += 1
        began = _forks
    try:
        yield
    finally:
        with _lock:
            if began == _forks:
                _pauses -= 1
                if _pauses == 0 and _resume:
                    gc.enable()


def _forked() -> None:
    """In a child forked during a pause: the collector as it was before the pause."""
    global _lock, _pauses, _forks
    _lock = threading.Lock()  # the parent's may have been held by another thread
    _forks += 1
    if _pauses:
        _pauses = 0
        if _resume:
            gc.enable()


os.register_at_fork(after_in_child=_forked)
