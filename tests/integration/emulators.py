"""Storage emulators that tests start on 127.0.0.1 as subprocesses, stopped by PID.

An emulator runs under a small Python supervisor that holds a pipe on stdin
which the test process never writes to: when the test process dies, SIGKILL
included, the pipe closes and the supervisor stops the emulator (what
``headrace.emulate``'s lifeline does for moto, for a program that is not
Python). :meth:`Emulator.stop` sends SIGTERM to the supervisor's PID, which
passes it on; the two share a process group only so that a last SIGKILL, if
they do not stop, reaches both.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from typing import IO

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


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Emulator:
    """``argv(port)`` on a free port, until :meth:`stop`; ready once ``ready_path`` answers."""

    def __init__(
        self, name: str, argv: Callable[[int], Sequence[str]], ready_path: str = "/"
    ) -> None:
        self.name = name
        self._argv = argv
        self._ready_path = ready_path
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self.port = 0

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def start(self, timeout_s: float = 30.0) -> Emulator:
        # Another process may take the port between probing and binding: one more try.
        for attempt in range(2):
            self.port = free_port()
            # Logs go to a file: a pipe nobody drains would fill up and stall the server.
            self._log = tempfile.TemporaryFile()
            self._proc = subprocess.Popen(
                [sys.executable, "-c", _SUPERVISOR, *self._argv(self.port)],
                stdin=subprocess.PIPE,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                self._wait_ready(timeout_s)
                return self
            except BaseException as exc:
                self.stop()
                if attempt == 1 or not isinstance(exc, RuntimeError):
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _wait_ready(self, timeout_s: float) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited with status {self._proc.returncode} before answering "
                    f"on {self.endpoint}: {self.log()[-800:]}"
                )
            try:
                with urllib.request.urlopen(self.endpoint + self._ready_path, timeout=1.0):
                    return
            except urllib.error.HTTPError:
                return  # it answered, if only to refuse an unsigned request
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"{self.name} did not answer on {self.endpoint} within {timeout_s} s")

    def log(self) -> str:
        if self._log is None:
            return ""
        self._log.seek(0)
        return self._log.read().decode(errors="replace").strip()

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10.0)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)  # the group this start() made
                proc.wait()
        if proc.stdin is not None:
            proc.stdin.close()
        if self._log is not None:
            self._log.close()
            self._log = None
