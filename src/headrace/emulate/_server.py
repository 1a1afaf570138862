"""A local HTTP server in a subprocess on a free 127.0.0.1 port, stopped by its PID.

What every emulator the tests and benchmarks start needs: a free port, the
server's output in a file
(a pipe nobody drains would fill up and stall it), a pipe on its stdin that
the parent never writes (its wrapper stops the server when the pipe closes:
the parent died, SIGKILL included), waiting until an HTTP path answers (or
the server exits, its output in the error), and stopping it: SIGTERM, then
SIGKILL to its process group (its own session) if it lingers.

The port is free when probed, not when the server binds it: another process
can take it in between, and then it answers the readiness check while our
server fails to bind (or has not tried yet), and the run talks to a stranger.
So an answer counts only if the socket listening on the port belongs to a
process of our server's session (Linux: ``/proc/net/tcp*`` and
``/proc/PID/fd``); where it does not, the server is stopped and started again
on another port (three launches in all). Elsewhere the check is that the
server is still running when the port answers.
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


_LAUNCHES = 3
_TCP_LISTEN = "0A"  # the state column of /proc/net/tcp for a listening socket


# The server is ours, on 127.0.0.1: asked directly. Through urllib's default opener the
# question went to the proxy that http_proxy names, and a server that was up "did not
# answer" (where 127.0.0.1 is not in no_proxy, as on many company machines).
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _PortTaken(StorageError):
    """Another process answered on the port we chose for our server."""


def _listening_sockets(port: int) -> set[int] | None:
    """Inodes of the TCP sockets listening on ``port``; ``None`` without ``/proc/net/tcp``."""
    found: set[int] = set()
    readable = False
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        readable = True
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != _TCP_LISTEN:
                continue
            if int(fields[1].rsplit(":", 1)[1], 16) == port:
                found.add(int(fields[9]))
    return found if readable else None


def _session_sockets(sid: int) -> set[int]:
    """Inodes of the sockets that the processes of session ``sid`` hold open."""
    out: set[int] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.getsid(int(entry)) != sid:
                continue
            fds = os.listdir(f"/proc/{entry}/fd")
        except OSError:  # exited meanwhile, or not ours to read
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{entry}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:[") and link.endswith("]"):
                out.add(int(link[8:-1]))
    return out


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
        lost: list[int] = []
        for launch in range(_LAUNCHES):  # the port may be taken between probing and binding
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
                if not isinstance(exc, StorageError):
                    raise
                if isinstance(exc, _PortTaken):
                    lost.append(self.port)
                if launch == _LAUNCHES - 1:
                    if lost:
                        raise StorageError(
                            f"{exc}; launched {_LAUNCHES} times, another process answered "
                            f"first on ports {lost}"
                        ) from exc
                    raise
        return self  # pragma: no cover - the loop returns or raises

    def _owns_port(self) -> bool | None:
        """Whether our server's session holds the socket listening on the port (Linux)."""
        assert self._proc is not None
        listening = _listening_sockets(self.port)
        if listening is None:
            return None
        # start_new_session made the server a session leader: its session id is its PID,
        # shared by whatever it starts (a lifeline wrapper, node, a supervisor's child).
        return bool(listening) and listening <= _session_sockets(self._proc.pid)

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
                with _DIRECT.open(self.endpoint + self._ready_path, timeout=1.0):
                    pass
            except urllib.error.HTTPError:
                pass  # it answered, if only with an error
            except OSError:
                time.sleep(0.05)
                continue
            if self._proc.poll() is None and self._owns_port() is not False:
                return
            # Our server may fail to bind (and exit) or not have tried yet: either way,
            # what answered is another process that took the port after free_port().
            raise _PortTaken(
                f"{self.name}: another process answers on {self.endpoint} (it took the port "
                f"between probing and binding); {self.name} "
                + (
                    "is running but does not listen there"
                    if self._proc.poll() is None
                    else f"exited with status {self._proc.returncode}: {self.log()[-400:]}"
                )
            )
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
