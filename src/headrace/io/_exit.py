"""Object-store requests in flight settle before the interpreter finalizes.

Python before 3.14 ends a thread that asks for the GIL during finalization with
``pthread_exit()``. obstore completes every request on one of its Tokio threads,
which takes the GIL to hand the result over (or, for a request cancelled on the
Python side, to see that it was): a request still in flight when a script
returned killed the process with SIGABRT (``pthread_exit`` unwinding a Rust
thread aborts) or SIGSEGV, after the script's work was done, and a job scheduler
marked the job failed. A blocking request in a caller's thread meets the same end
when it returns into Rust frames mid-finalization.

So every try of every :class:`~headrace.io.ObjectStore` is counted here
(``headrace.io._object_tries``), and an exit handler, while the interpreter is
still whole, holds new tries and waits, for at most :data:`EXIT_WAIT_S`, until
none is in flight; past that it warns of what it abandoned and lets the exit go
on (it never hangs the exit).

Exit handlers run last-registered first, so a user's handler registered before
headrace was imported runs after this one: requests made by exit handlers (in the
thread running them, or on a store's loop on its behalf) are never refused, and
finish before their handler returns. Only requests begun before the exit by other
threads are held: such a thread (a daemon: the rest were joined before exit
handlers ran) waits where it stands, without an error, as the interpreter would
stop it at finalization, rather than printing a traceback for a refusal.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import threading
import time
from contextvars import Context, ContextVar, copy_context
from typing import NoReturn

from headrace.errors import StorageError

__all__ = [
    "EXIT_WAIT_S",
    "HOLD_S",
    "agrace",
    "ahold",
    "begin",
    "begins",
    "caller_context",
    "end",
    "hold",
]

log = logging.getLogger("headrace")

#: The longest the exit waits for object-store tries in flight, all stores together.
EXIT_WAIT_S = 5.0

#: How long after a try ended its Tokio task may still reach for the GIL. A cancelled
#: one wakes on the cancellation, drops the request and takes the GIL once to see it was
#: cancelled; one that completed on a store's loop takes it again after handing its
#: result over (with the grace after cancelled tries only, 4 in 24 runs of the repro
#: aborted once the loops were no longer stopped, cancelling, at exit). Microseconds
#: later on an idle machine, milliseconds on a loaded one.
_GRACE_S = 0.1

#: How long a thread whose request is held at exit waits before the request is refused
#: (it is meant to wait until the process ends): the bound keeps an exit handler that
#: waits for such a thread from hanging the exit.
HOLD_S = 60.0

_cond = threading.Condition()
_in_flight = 0
_exiting = False
_exit_thread: threading.Thread | None = None
_last_end = float("-inf")

#: Set on a store loop's task run for an exit handler: its tries go on during the exit.
_for_exit: ContextVar[bool] = ContextVar("headrace_for_exit", default=False)


def _exempt() -> bool:
    return _for_exit.get() or threading.current_thread() is _exit_thread


def caller_context() -> Context:
    """A copy of the calling thread's context, marked as an exit handler's when it is
    one: a store loop's task started in it (``asyncio`` takes the context of the call
    that schedules it) and the tasks that one starts are not held at exit."""
    ctx = copy_context()
    ctx.run(_for_exit.set, _exiting and _exempt())
    return ctx


def begins() -> bool:
    """Count a try in; ``False`` (not counted) if the interpreter is exiting and the
    caller is not one of its exit handlers: the caller then :func:`hold` s. One step
    under the lock, so the exit never misses a try begun as it starts."""
    global _in_flight
    with _cond:
        if _exiting and not _exempt():
            return False
        _in_flight += 1
        return True


def hold(where: str) -> NoReturn:
    """Wait, as a thread the exit will stop (see :data:`HOLD_S`), then refuse."""
    threading.Event().wait(HOLD_S)
    raise StorageError(f"{where}: not requested: the interpreter is exiting")


async def ahold(where: str) -> NoReturn:
    """:func:`hold` on an event loop: the task waits, not the loop."""
    await asyncio.sleep(HOLD_S)
    raise StorageError(f"{where}: not requested: the interpreter is exiting")


async def agrace() -> None:
    """For an exit handler's request on a store's loop, wait out :data:`_GRACE_S` before
    its caller hears of the outcome: the handler may be the last, and finalization
    follows its return with nothing to wait for the Tokio thread that answered."""
    if _exiting and _exempt():
        await asyncio.sleep(_GRACE_S)


def begin() -> None:
    global _in_flight
    with _cond:
        _in_flight += 1


def end() -> None:
    global _in_flight, _last_end
    with _cond:
        _in_flight -= 1
        _last_end = time.monotonic()
        if _in_flight == 0:
            _cond.notify_all()


def _settle() -> None:
    global _exit_thread, _exiting
    wait_s = EXIT_WAIT_S
    with _cond:
        _exiting, _exit_thread = True, threading.current_thread()
        _cond.wait_for(lambda: _in_flight == 0, timeout=wait_s)
        left = _in_flight
        since_end = time.monotonic() - _last_end
    if left:
        log.warning(
            "headrace: exiting with %d object-store request(s) still in flight after "
            "waiting %.1f s; abandoned (if one completes while Python finalizes, the "
            "process may abort: close stores and loaders before exiting)",
            left,
            wait_s,
        )
    if since_end < _GRACE_S:
        time.sleep(_GRACE_S - since_end)


def _forked() -> None:
    # The parent's tries in flight are its threads' and Tokio's, none of which exist in a
    # forked child: counted there, they would hold the child's exit for EXIT_WAIT_S.
    global _cond, _exit_thread, _in_flight, _exiting, _last_end
    _cond = threading.Condition()  # a parent's thread may have held the old one's lock
    _in_flight, _exiting, _exit_thread, _last_end = 0, False, None, float("-inf")


os.register_at_fork(after_in_child=_forked)

# Registered on import, not with the first store: exit handlers run last-registered
# first, and headrace.io is imported before the Loader registers its handler, so
# loaders stop their read-ahead (cleanly) before this one refuses new tries.
atexit.register(_settle)
