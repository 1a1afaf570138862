"""ServerProcess asks its own server whether it is up, whatever proxy the environment names.

The readiness check went through ``urllib``'s environment proxies: with ``http_proxy``
set (as on many company machines) and 127.0.0.1 not in ``no_proxy``, the question went
to that proxy, never to the server, and a server that was up "did not answer within
30 s" (moto, for ``LocalS3`` and ``bench --storage s3``).
"""

from __future__ import annotations

import socket

import pytest

from headrace.emulate._lifeline import argv_for
from headrace.emulate._server import ServerProcess


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("name", ["http_proxy", "HTTP_PROXY", "all_proxy"])
def test_the_readiness_check_goes_to_the_server_not_to_an_environment_proxy(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv(name, f"http://127.0.0.1:{_closed_port()}")  # nothing listens there
    server = ServerProcess(
        "http.server",
        lambda port: argv_for("http.server", "--bind", "127.0.0.1", str(port)),
        start_timeout_s=10.0,
        stop_timeout_s=5.0,
    )
    try:
        server.start()
        assert server.pid is not None
    finally:
        server.stop()
