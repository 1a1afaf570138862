"""Storage emulators that are not Python, started by the tests on 127.0.0.1 and stopped by PID.

headrace's :class:`~headrace.emulate._server.ServerProcess` runs them (free
port, output to a file, waiting until a path answers, SIGTERM then SIGKILL of
the process group). What it needs of ``argv`` is a lifeline: here a small
Python supervisor that holds the pipe on stdin, which the test process never
writes to. When the test process dies, SIGKILL included, the pipe closes and
the supervisor stops the emulator (what ``headrace.emulate``'s lifeline does
for moto); SIGTERM to the supervisor is passed on.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

from headrace.emulate._server import ServerProcess

_SUPERVISOR = """\
import signal, subprocess, sys, threading
child = subprocess.Popen(sys.argv[1:], stdin=subprocess.DEVNULL)
signal.signal(signal.SIGTERM, lambda *_: child.terminate())
def lifeline():
    sys.stdin.buffer.read()
    child.terminate()
threading.Thread(target=lifeline, daemon=True).start()
sys.exit(child.wait())
"""


def supervised(
    name: str, argv: Callable[[int], Sequence[str]], ready_path: str = "/"
) -> ServerProcess:
    """``argv(port)`` under the supervisor; ready once ``ready_path`` answers."""
    return ServerProcess(
        name,
        lambda port: [sys.executable, "-c", _SUPERVISOR, *argv(port)],
        ready_path=ready_path,
    )
