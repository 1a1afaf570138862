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
still whole, refuses new tries and waits, for at most :data:`EXIT_WAIT_S`, until
none is in flight; past that it warns of what it abandoned and lets the exit go
on (it never hangs the exit).
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time

from headrace.errors import StorageError

__all__ = ["EXIT_WAIT_S", "begin", "end", "refuse_if_exiting"]

log = logging.getLogger("headrace")

#: The longest the exit waits for object-store tries in flight, all stores together.
EXIT_WAIT_S = 5.0

#: How long after a try was cancelled its Tokio task may still reach for the GIL: it
#: wakes on the cancellation, drops the request and takes the GIL once to see it was
#: cancelled, microseconds later on an idle machine, milliseconds on a loaded one.
_CANCEL_GRACE_S = 0.1

_cond = threading.Condition()
_in_flight = 0
_exiting = False
_last_cancel = float("-inf")


def refuse_if_exiting(where: str) -> None:
    """Raise if the interpreter is exiting: a try started now might outlive it."""
    if _exiting:
        raise StorageError(f"{where}: not requested: the interpreter is exiting")


def begin() -> None:
    global _in_flight
    with _cond:
        _in_flight += 1


def end(*, cancelled: bool = False) -> None:
    global _in_flight, _last_cancel
    with _cond:
        _in_flight -= 1
        if cancelled:
            _last_cancel = time.monotonic()
        if _in_flight == 0:
            _cond.notify_all()


def _settle() -> None:
    global _exiting
    wait_s = EXIT_WAIT_S
    with _cond:
        _exiting = True
        _cond.wait_for(lambda: _in_flight == 0, timeout=wait_s)
        left = _in_flight
        since_cancel = time.monotonic() - _last_cancel
    if left:
        log.warning(
            "headrace: exiting with %d object-store request(s) still in flight after "
            "waiting %.1f s; abandoned (if one completes while Python finalizes, the "
            "process may abort: close stores and loaders before exiting)",
            left,
            wait_s,
        )
    if since_cancel < _CANCEL_GRACE_S:
        time.sleep(_CANCEL_GRACE_S - since_cancel)


def _forked() -> None:
    # The parent's tries in flight are its threads' and Tokio's, none of which exist in a
    # forked child: counted there, they would hold the child's exit for EXIT_WAIT_S.
    global _cond, _in_flight, _exiting, _last_cancel
    _cond = threading.Condition()  # a parent's thread may have held the old one's lock
    _in_flight, _exiting, _last_cancel = 0, False, float("-inf")


os.register_at_fork(after_in_child=_forked)

# Registered on import, not with the first store: exit handlers run last-registered
# first, and headrace.io is imported before the Loader registers its handler, so
# loaders stop their read-ahead (cleanly) before this one refuses new tries.
atexit.register(_settle)
