"""ServerProcess: a port taken between probing and binding is noticed, and the launch retried.

A thief (an HTTP server in this process, so outside the server's session)
listens on the port that ``free_port`` hands out first: it answers the
readiness check while the real server cannot bind. Only ``free_port`` is
patched (to hand out the stolen port); the sockets and processes are real.
"""

from __future__ import annotations

import http.server
import sys
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from headrace.emulate import _server
from headrace.emulate._server import ServerProcess
from headrace.errors import StorageError


class _Thief(http.server.BaseHTTPRequestHandler):
    answered = 0

    def do_GET(self) -> None:
        type(self).answered += 1
        body = b"thief"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def thief() -> Iterator[int]:
    """The port of an HTTP server that is not ours."""
    _Thief.answered = 0
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Thief)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _http_server(root: Path) -> ServerProcess:
    return ServerProcess(
        "http.server",
        lambda port: [
            sys.executable,
            "-m",
            "http.server",
            str(port),
            "--bind",
            "127.0.0.1",
            "--directory",
            str(root),
        ],
        start_timeout_s=15,
        stop_timeout_s=2,
    )


def test_a_stolen_port_is_noticed_and_the_server_started_on_another(
    tmp_path: Path, thief: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "mark").write_bytes(b"ours")
    ports = iter([thief])
    real = _server.free_port
    monkeypatch.setattr(_server, "free_port", lambda: next(ports, None) or real())
    server = _http_server(tmp_path).start()
    try:
        assert _Thief.answered >= 1  # the thief answered the first readiness check
        assert server.port != thief
        with urllib.request.urlopen(server.endpoint + "/mark", timeout=5) as r:
            assert r.read() == b"ours"
    finally:
        server.stop()


def test_a_port_stolen_at_every_launch_fails_naming_the_ports(
    tmp_path: Path, thief: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_server, "free_port", lambda: thief)
    server = _http_server(tmp_path)
    with pytest.raises(
        StorageError,
        match=rf"(?s)http\.server: another process answers on http://127\.0\.0\.1:{thief} "
        rf"\(it took the port between probing and binding\); .*launched 3 times, another process "
        rf"answered first on ports \[{thief}, {thief}, {thief}\]$",
    ):
        server.start()
    assert server.pid is None and _Thief.answered >= 3


def test_our_own_server_is_recognised_as_the_owner(tmp_path: Path) -> None:
    server = _http_server(tmp_path).start()
    try:
        if _server._listening_sockets(server.port) is None:
            pytest.skip("no /proc/net/tcp here: ownership cannot be checked")
        assert server._owns_port() is True
    finally:
        server.stop()
