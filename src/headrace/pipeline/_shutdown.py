"""Closing a loader within a bounded time, also when its storage has stopped answering.

A read stuck in a stalled mount (a FUSE server or NFS server that stopped
answering) never returns and cannot be cancelled: the thread inside
``read(2)`` or a page fault stays there until the storage answers. So a loader's
``close()`` never waits for it beyond a bound. It asks the read-ahead thread to
stop, then closes the source on a daemon thread (``headrace-close``) and waits
for that, all within the bound. A source's ``close()`` may itself wait, on its
own lock (held by the stuck read) or for reads in flight that write into memory
it would release; run on its own thread, it does that without holding the
caller, and releases the source's files and memory once the stuck read returns,
never under it. An object store's ``close()`` cancels its GETs first, so there it
ends at once, the stuck read returns, and the read-ahead thread is joined: nothing
is left behind and nothing is said (until 2026-12-07 every store that stopped
answering got the warning below). What was left behind (a read stuck in the
kernel) is said in a warning, naming the reads in flight.

Loaders not closed when the interpreter exits are closed by :func:`close_open`,
with the same bound (no warning: the process is going).
"""

from __future__ import annotations

import atexit
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Protocol

from headrace.io import ReadInFlight

__all__ = ["EXIT_CLOSE_S", "SOURCE_CLOSE_S", "close_source", "closed_at_exit", "left_behind"]

#: How long exit waits for each loader still open (stalled storage: a hung NFS mount
#: would otherwise hold the exit for the close bound per loader).
EXIT_CLOSE_S = 1.0

#: At least this long for a source's close(), even after the stop took the whole wait:
#: an object store's close() cancels its GETs and returns in a few ms.
SOURCE_CLOSE_S = 0.2

#: How many reads in flight the warning names (the oldest: those a stalled mount holds).
_NAMED = 3


class _Closable(Protocol):
    _closed: bool  # its close() got as far as the source's close

    def _close(self, timeout: float, *, warn: bool) -> None: ...


def close_source(
    close: Callable[[], None], lock: threading.Lock, timeout: float, *, under_read: bool
) -> bool:
    """Call ``close`` under ``lock`` on a daemon thread; wait up to ``timeout``.

    ``under_read``: a read that holds ``lock`` may never return; ``close`` is then
    called first without the lock (an object store's cancels its GETs in flight,
    which ends that read), and again under it once the read has returned, to
    release what the read opened after the first. ``True`` once it has returned
    (an error it raised is raised here); ``False`` if it is still running: it goes
    on in the background.
    """
    failed: list[BaseException] = []

    def run() -> None:
        try:
            if under_read:
                close()
            with lock:
                close()
        except BaseException as exc:  # raised in the caller's thread, if still waiting
            failed.append(exc)

    closer = threading.Thread(target=run, name="headrace-close", daemon=True)
    try:
        closer.start()
    except RuntimeError:
        # Python 3.12 starts no thread in an exit handler ("can't create new thread at
        # interpreter shutdown"): close here, between reads only, within the bound.
        if under_read or not lock.acquire(timeout=timeout):
            return False  # the process is ending: its files go with it
        try:
            close()
        finally:
            lock.release()
        return True
    closer.join(timeout)
    if closer.is_alive():
        return False
    if failed:
        raise failed[0]
    return True


def left_behind(
    name: str,
    stopped: bool,
    inside: tuple[int, int, float] | None,
    took: float,
    reads: Sequence[ReadInFlight] = (),
) -> str:
    """What a loader's close() gave up waiting for, and what becomes of it: the
    read-ahead thread inside a read of steps ``inside = (first, last, since)`` (not
    ``stopped``), waiting on ``reads`` (this process's in flight, oldest first), or the
    source's close() (``name``: the source's type)."""
    if not stopped:
        what = f"still inside {name}.read"
        if inside is not None:
            lo, hi, since = inside
            what += f" of steps {lo}-{hi}, for {time.monotonic() - since:.1f} s"
        on = ""
        if reads:
            more = f", and {len(reads) - _NAMED} more" if len(reads) > _NAMED else ""
            on = (
                f"; this process's reads in flight: "
                f"{', '.join(str(r) for r in reads[:_NAMED])}{more}"
            )
        return (
            f"Loader.close(): gave up on the read-ahead thread, {what} (stalled storage?)"
            f"{on}. Left behind on daemon threads: that read, whose batches are dropped, and "
            f"the {name}'s close(), which releases its files and memory when the read "
            "returns. Until then a new Loader over this same source object waits for "
            "it; a new source over the same files does not."
        )
    return (
        f"Loader.close(): {name}.close() had not returned after {took:.1f} s (it waits "
        "for reads in flight, or for another loader's read of the same source: "
        "stalled storage?). It goes on on a daemon thread (headrace-close) and "
        "releases the source's files and memory when those reads return."
    )


#: Loaders not closed yet, closed at exit while the interpreter is whole. An iterator
#: still held then (a script that ends inside its loop, or keeps ``it = iter(loader)``)
#: is finalised later, after modules are torn down, and its close() printed
#: "Exception ignored ... ImportError: sys.meta_path is None".
_OPEN: weakref.WeakSet[_Closable] = weakref.WeakSet()


def closed_at_exit(loader: _Closable) -> None:
    """Close ``loader`` at exit if it is still open then."""
    _OPEN.add(loader)


@atexit.register
def close_open() -> None:
    for loader in list(_OPEN):
        # Also one whose close() an interrupt cut short: CLOSED, its source still open.
        if not loader._closed:
            loader._close(EXIT_CLOSE_S, warn=False)
