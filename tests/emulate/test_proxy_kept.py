"""LatencyProxy keeps a client connection's upstream connection, as the client keeps its
own: real sockets on 127.0.0.1, an upstream that serves many requests a connection and
says in each answer which connection and which of its requests it was.

Until 2026-12-06 every request went upstream on a new connection: moto paid 1.5 times the
CPU a GET through the proxy (benchmarks/proxy_kept_ab.py), and a remote store
behind it a handshake more per request than its clients would.
"""

from __future__ import annotations

import http.client
import itertools
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from headrace.emulate import LatencyProxy


class _KeptUpstream:
    """Answers each request on a connection with ``conn=C req=R`` (1-based), framed by
    Content-Length and kept open, until ``per_connection`` requests; then closes the
    connection unannounced (no ``Connection: close``; ``reset``: with an RST), as a
    store's idle timeout does. ``silent=(C, R)``: request R of connection C is read and
    never answered; ``hung_up`` is set when the proxy then closes that connection."""

    def __init__(
        self,
        per_connection: int | None = None,
        *,
        reset: bool = False,
        silent: tuple[int, int] | None = None,
    ) -> None:
        self.per_connection, self.reset, self.silent = per_connection, reset, silent
        self.hung_up = threading.Event()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.bodies: list[int] = []  # the length of each request's body, in order
        self._numbers = itertools.count(1)
        self._threads: list[threading.Thread] = []
        accept = threading.Thread(target=self._accept, daemon=True)
        accept.start()
        self._threads.append(accept)

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return  # closed
            t = threading.Thread(target=self._serve, args=(conn, next(self._numbers)))
            t.start()
            self._threads.append(t)

    def _serve(self, conn: socket.socket, number: int) -> None:
        with conn, conn.makefile("rb") as f:
            for req in itertools.count(1):
                line = f.readline()
                if not line:
                    return
                method = line.split(b" ")[0]
                length = 0
                while (header := f.readline()) not in (b"\r\n", b""):
                    name, _, value = header.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                self.bodies.append(len(f.read(length)))
                if (number, req) == self.silent:
                    if not f.readline():  # EOF: the proxy gave the connection up
                        self.hung_up.set()
                    return
                body = f"conn={number} req={req}".encode()
                head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                conn.sendall(head + (b"" if method == b"HEAD" else body))
                if req == self.per_connection:
                    if self.reset:  # SO_LINGER 0: close() sends RST
                        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")
                    return

    def close(self) -> None:
        self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        for t in self._threads:
            t.join(timeout=5)
            assert not t.is_alive()


@pytest.fixture
def proxy_to() -> Iterator[Callable[..., _KeptUpstream]]:
    """``proxy_to(per_connection=None, reset=False, silent=None)``: an upstream, closed
    after the test."""
    made: list[_KeptUpstream] = []

    def make(per_connection: int | None = None, **kw: Any) -> _KeptUpstream:
        made.append(_KeptUpstream(per_connection, **kw))
        return made[-1]

    yield make
    for upstream in made:
        upstream.close()


def _ask(conn: http.client.HTTPConnection, method: str, body: bytes | None = None) -> str:
    conn.request(method, "/bucket/key", body=body)
    resp = conn.getresponse()
    assert resp.status == 200, (resp.status, resp.read())
    return resp.read().decode()


def test_a_client_connections_requests_reach_the_store_on_one_connection(
    proxy_to: Callable[..., _KeptUpstream],
) -> None:
    upstream = proxy_to()
    with LatencyProxy(upstream.url) as proxy:
        conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10)
        got = [_ask(conn, m) for m in ("GET", "GET", "HEAD", "DELETE", "GET")]
        other = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10)
        got_other = [_ask(other, "GET"), _ask(conn, "GET"), _ask(other, "GET")]
        conn.close()
        other.close()
    # HEAD's answer has no body (its Content-Length says the GET's); the connection goes on.
    assert got == ["conn=1 req=1", "conn=1 req=2", "", "conn=1 req=4", "conn=1 req=5"]
    assert got_other == ["conn=2 req=1", "conn=1 req=6", "conn=2 req=2"]
    assert (proxy.stats.connections, proxy.stats.upstream_connections) == (2, 2)


def test_a_request_with_a_body_gives_up_its_upstream_connection(
    proxy_to: Callable[..., _KeptUpstream],
) -> None:
    # Nothing of a request body may be left unsent on a connection the next request takes.
    upstream = proxy_to()
    with LatencyProxy(upstream.url) as proxy:
        conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10)
        got = [_ask(conn, "GET"), _ask(conn, "PUT", b"x" * 1000), _ask(conn, "GET")]
        conn.close()
    assert got == ["conn=1 req=1", "conn=1 req=2", "conn=2 req=1"]
    assert upstream.bodies == [0, 1000, 0]
    assert proxy.stats.upstream_connections == 2


@pytest.mark.parametrize("reset", [False, True], ids=["closed", "reset"])
def test_a_kept_connection_the_store_closed_is_replaced_without_an_error(
    proxy_to: Callable[..., _KeptUpstream], reset: bool
) -> None:
    # The store ends each connection after one answer, unannounced: the proxy finds its
    # kept one closed (EOF) or reset when it sends the next request, and sends it again
    # on a new connection; the client sees every answer, none a 502.
    upstream = proxy_to(per_connection=1, reset=reset)
    with LatencyProxy(upstream.url) as proxy:
        conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10)
        got = [_ask(conn, "GET") for _ in range(4)]
        conn.close()
    assert got == [f"conn={i} req=1" for i in range(1, 5)]
    assert upstream.bodies == [0] * 4  # each request answered once
    assert (proxy.stats.connections, proxy.stats.upstream_connections) == (1, 4)


def test_a_kept_connection_gone_silent_is_a_504_and_given_up(
    proxy_to: Callable[..., _KeptUpstream],
) -> None:
    # The store reads the second request on the kept connection and never answers: the
    # client gets a 504 naming the wait, the proxy closes that upstream connection (a
    # silent store must not hold a socket for the proxy's life), and the next client's
    # request goes on a new one.
    upstream = proxy_to(silent=(1, 2))
    with LatencyProxy(upstream.url, upstream_timeout_s=0.2) as proxy:
        conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10)
        first = _ask(conn, "GET")
        conn.request("GET", "/bucket/key")
        resp = conn.getresponse()
        timed_out = (resp.status, resp.read().decode())
        conn.close()
        assert upstream.hung_up.wait(5)
        again = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10)
        after = _ask(again, "GET")
        again.close()
    assert first == "conn=1 req=1"
    assert timed_out == (504, f"upstream {upstream.url} sent no response within 0.2 s")
    assert after == "conn=2 req=1"
    assert proxy.stats.upstream_connections == 2
