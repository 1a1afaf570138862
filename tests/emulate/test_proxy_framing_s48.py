"""LatencyProxy on heads it cannot frame: a status line with no status, a negative or
doubled Content-Length, a chunk size that is no number. Real sockets on 127.0.0.1.

An upstream's is answered ``502`` naming the upstream and what was wrong, a client's
``400``; neither leaves a bare close, a traceback in the log, or a task behind.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable

import pytest

from headrace.emulate import LatencyProxy

_OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


class _Upstream:
    """A one-request-at-a-time TCP server on 127.0.0.1 that answers with ``reply``."""

    def __init__(self, reply: bytes) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.reply = reply
        self.seen: list[bytes] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                self.seen.append(conn.recv(65536))
                conn.sendall(self.reply)

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self.thread.join(timeout=5)


def _exchange(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
        client.sendall(request)
        client.shutdown(socket.SHUT_WR)
        got = b""
        while chunk := client.recv(65536):
            got += chunk
    return got


def _through(reply: bytes, request: bytes, check: Callable[[bytes, str], None]) -> _Upstream:
    upstream = _Upstream(reply)
    try:
        with LatencyProxy(upstream.url) as proxy:
            check(_exchange(proxy.port, request), upstream.url)
            assert proxy.stats.in_flight == 0
            assert not proxy._tasks
    finally:
        upstream.close()
    return upstream


_GET = b"GET /bucket/key HTTP/1.1\r\nHost: x\r\n\r\n"


@pytest.mark.parametrize(
    ("reply", "said"),
    [
        (b"GARBAGE\r\n\r\n", "'GARBAGE'"),
        (b"HTTP/1.1 abc OK\r\nContent-Length: 2\r\n\r\nok", "'HTTP/1.1 abc OK'"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: -3\r\n\r\nok", "Content-Length -3"),
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 5\r\n\r\nok",
            "Content-Length 2 and 5",
        ),
    ],
    ids=["no-status", "status-not-a-number", "negative-length", "two-lengths"],
)
def test_an_upstream_head_that_cannot_be_framed_is_a_502_naming_it(
    reply: bytes, said: str, caplog: pytest.LogCaptureFixture
) -> None:
    def check(got: bytes, url: str) -> None:
        assert got.startswith(b"HTTP/1.1 502 Bad Gateway\r\n"), got[:200]
        body = got.partition(b"\r\n\r\n")[2].decode()
        assert body.startswith(f"upstream {url} sent a malformed response head: "), body
        assert said in body, body

    _through(reply, _GET, check)
    # A bare close used to come with "Unhandled exception in client_connected_cb".
    assert not [r for r in caplog.records if r.levelname == "ERROR"], caplog.text


_LONG_CHUNK_LINE = b"2;" + b"e" * (70 * 1024) + b"\r\nok\r\n0\r\n\r\n"


def test_an_upstream_chunk_line_past_64_kib_is_a_502_naming_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def check(got: bytes, url: str) -> None:
        assert got.startswith(b"HTTP/1.1 502 Bad Gateway\r\n"), got[:200]
        body = got.partition(b"\r\n\r\n")[2].decode()
        assert body == (
            f"upstream {url} failed in the middle of its response body: "
            "a chunk-size or trailer line over 64 KiB"
        )

    reply = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + _LONG_CHUNK_LINE
    _through(reply, _GET, check)
    assert not [r for r in caplog.records if r.levelname == "ERROR"], caplog.text


@pytest.mark.parametrize(
    ("request_bytes", "said"),
    [
        (b"PUT /k HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", "Content-Length -1"),
        (
            b"PUT /k HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
            "Content-Length 1 and 2",
        ),
        (
            b"PUT /k HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"zz\r\nab\r\n0\r\n\r\n",
            "chunk size",
        ),
        (
            b"PUT /k HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + _LONG_CHUNK_LINE,
            "over 64 KiB",
        ),
    ],
    ids=["negative-length", "two-lengths", "bad-chunk-size", "chunk-line-past-64-kib"],
)
def test_a_client_request_that_cannot_be_framed_is_a_400_and_not_forwarded(
    request_bytes: bytes, said: str
) -> None:
    def check(got: bytes, _url: str) -> None:
        assert got.startswith(b"HTTP/1.1 400 Bad Request\r\n"), got[:200]
        assert b"Connection: close" in got
        assert said in got.partition(b"\r\n\r\n")[2].decode()

    upstream = _through(_OK, request_bytes, check)
    assert upstream.seen == []  # nothing forwarded


def test_a_bodyless_head_answer_keeps_its_connection() -> None:
    # The status is read once for both checks: a HEAD's 200 and a 304 stay framed.
    upstream = _Upstream(b"HTTP/1.1 304 Not Modified\r\nETag: x\r\n\r\n")
    try:
        with LatencyProxy(upstream.url) as proxy:
            with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as client:
                client.sendall(_GET)
                got = b""
                while b"\r\n\r\n" not in got:
                    got += client.recv(65536)
                assert got == b"HTTP/1.1 304 Not Modified\r\nETag: x\r\n\r\n"
    finally:
        upstream.close()


@pytest.mark.parametrize(
    ("connection", "closed"),
    [(b"", True), (b"Connection: keep-alive\r\n", False)],
    ids=["plain", "keep-alive"],
)
def test_an_http_1_0_request_closes_after_its_answer_unless_it_asks_to_keep(
    connection: bytes, closed: bool
) -> None:
    upstream = _Upstream(_OK)
    try:
        with LatencyProxy(upstream.url) as proxy:
            with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as client:
                client.sendall(b"GET /k HTTP/1.0\r\nHost: x\r\n" + connection + b"\r\n")
                got = b""
                while not got.endswith(b"ok"):
                    got += client.recv(65536)
                assert got.startswith(b"HTTP/1.1 200 OK\r\n")
                client.settimeout(0.5 if not closed else 10)
                try:
                    more: bytes | None = client.recv(65536)  # b"": closed by the proxy
                except TimeoutError:
                    more = None  # still open
                assert (more == b"") is closed
    finally:
        upstream.close()


def test_connection_tokens_are_read_one_by_one() -> None:
    from headrace.emulate._proxy_http import Message

    assert Message(b"GET / HTTP/1.1\r\nConnection: keep-alive, close\r\n\r\n").close
    assert not Message(b"GET / HTTP/1.1\r\nConnection: Keep-Alive\r\n\r\n").close
    assert Message(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", response=True).close
    assert not Message(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", response=True).close
