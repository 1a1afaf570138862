"""Server subprocesses that die with their parent: a pipe on stdin, and its EOF.

The command line from :func:`argv_for` runs ``MODULE`` as ``__main__`` (like
``python -m MODULE ARG...``) and watches stdin from a daemon thread. The
parent starts it with ``stdin=PIPE`` and never writes; when the parent exits
for any reason, SIGKILL included, the kernel closes the pipe's write end, the
read returns EOF and the child sends itself SIGTERM, which moto's server and
libfuse (it unmounts) both treat as a clean stop; what it registered with
:func:`on_parent_exit` runs first.

A pipe rather than ``PR_SET_PDEATHSIG``: that signal fires when the *thread*
that forked the child exits, so a server started from a short-lived thread
would die early, and it is Linux-only.
"""

from __future__ import annotations

import contextlib
import os
import runpy
import signal
import sys
import threading
from collections.abc import Callable

__all__ = ["argv_for", "main", "on_parent_exit", "watch_stdin"]

# Run on the parent's exit before the SIGTERM (see on_parent_exit).
_before_term: list[Callable[[], None]] = []


def argv_for(module: str, *args: str) -> list[str]:
    """The command line that runs ``python -m module args...`` under the lifeline."""
    # ``-c`` rather than ``-m`` this module: the package imports it already, and
    # runpy warns (on stderr, into error messages) about running such a module.
    return [sys.executable, "-c", f"import {__name__} as m; m.main()", module, *args]


def _wait_for_eof() -> None:
    fd = sys.stdin.fileno()
    while True:
        try:
            if not os.read(fd, 4096):
                break
        except InterruptedError:  # pragma: no cover - PEP 475 retries this itself
            continue
        except OSError:
            break
    for fn in _before_term:
        with contextlib.suppress(Exception):  # the SIGTERM comes whatever fails here
            fn()
    os.kill(os.getpid(), signal.SIGTERM)


def on_parent_exit(fn: Callable[[], None]) -> None:
    """Run ``fn`` when the parent is gone, before this process is sent SIGTERM.

    A FUSE server mounts first and installs libfuse's SIGTERM handler (which
    unmounts) a moment later; a SIGTERM in between kills it with the mount left
    behind, a dead mount point ("Transport endpoint is not connected") that only
    ``fusermount3 -u`` clears. Seen once under load: its ``fn`` detaches the mount
    itself first.
    """
    _before_term.append(fn)


def watch_stdin() -> None:
    """From a daemon thread: SIGTERM this process once stdin reaches EOF."""
    threading.Thread(target=_wait_for_eof, name="lifeline", daemon=True).start()


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit("usage: python -c 'import headrace.emulate._lifeline as m; m.main()' MODULE ...")
    module = sys.argv[1]
    sys.argv = [module, *sys.argv[2:]]
    watch_stdin()
    runpy.run_module(module, run_name="__main__", alter_sys=True)
