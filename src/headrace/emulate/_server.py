"""A local HTTP server in a subprocess on a free 127.0.0.1 port, stopped by its PID.

What every emulator the tests and benchmarks start needs: a free port (one
more try if another process takes it first), the server's output in a file
(a pipe nobody drains would fill up and stall it), a pipe on its stdin that
the parent never writes (its wrapper stops the server when the pipe closes:
the parent died, SIGKILL included), waiting until an HTTP path answers (or
the server exits, its output in the error), and stopping it: SIGTERM, then
SIGKILL to its process group (its own session) if it lingers.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from typing import IO, Self

from headrace.errors import StorageError

__all__ = ["ServerProcess", "free_port"]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerProcess:
    """``argv(port)`` on a free port until :meth:`stop`; ready once ``ready_path`` answers.

    ``argv`` must stop the server when its stdin closes (a lifeline wrapper).
    Errors while starting are :class:`StorageError` naming the server, its
    endpoint and the end of its output.
    """

    def __init__(
        self,
        name: str,
        argv: Callable[[int], Sequence[str]],
        *,
        ready_path: str = "/",
        env: Mapping[str, str] | None = None,
        start_timeout_s: float = 30.0,
        stop_timeout_s: float = 10.0,
    ) -> None:
        self.name = name
        self._argv = argv
        self._ready_path = ready_path
        self._env = None if env is None else dict(env)
        self.start_timeout_s = start_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self.port = 0

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def start(self) -> Self:
        if self._proc is not None:
            return self
        for attempt in range(2):  # the port may be taken between probing and binding
            self.port = free_port()
            self._log = tempfile.TemporaryFile()
            self._proc = subprocess.Popen(
                list(self._argv(self.port)),
                stdin=subprocess.PIPE,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                env=self._env,
                start_new_session=True,
            )
            try:
                self._wait_ready()
                return self
            except BaseException as exc:
                # Ctrl-C or any error while waiting must not leave the server running.
                self.stop()
                if attempt == 1 or not isinstance(exc, StorageError):
                    raise
        return self  # pragma: no cover - the loop returns or raises

    def _wait_ready(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise StorageError(
                    f"{self.name} exited with status {self._proc.returncode} before answering "
                    f"on {self.endpoint}: {self.log()[-800:]}"
                )
            try:
                with urllib.request.urlopen(self.endpoint + self._ready_path, timeout=1.0):
                    return
            except urllib.error.HTTPError:
                return  # it answered, if only with an error
            except OSError:
                time.sleep(0.05)
        raise StorageError(
            f"{self.name} did not answer on {self.endpoint} within {self.start_timeout_s} s"
        )

    def log(self) -> str:
        """What the server has written so far."""
        if self._log is None:
            return ""
        self._log.seek(0)
        return self._log.read().decode(errors="replace").strip()

    def stop(self) -> None:
        """SIGTERM it, SIGKILL its process group if it has not exited in time. Idempotent."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)  # its own session: start() made it
                proc.wait()
        if proc.stdin is not None:
            proc.stdin.close()
        if self._log is not None:
            self._log.close()
            self._log = None
