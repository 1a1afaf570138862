"""A LatencyProxy's ``upstream_timeout_s`` bounds an upstream's silences, not its whole body.

The body was read under one timeout: an upstream that sent steadily but took longer than
``upstream_timeout_s`` for all of it (a large object from a remote store behind the
proxy, 30 s by default) was answered 504, as if it had hung.
"""

from __future__ import annotations

import http.client
import socket
import threading
import time

import pytest

from headrace.emulate import LatencyProxy

_PIECES = 15
_PIECE = b"p" * 1000


def _trickle(chunked: bool) -> tuple[socket.socket, str, threading.Event]:
    """An upstream that sends its body in pieces, 50 ms apart: 0.75 s in all."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(4)
    done = threading.Event()

    def serve() -> None:
        conn, _ = sock.accept()
        with conn:
            conn.recv(65536)
            if chunked:
                conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            else:
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (_PIECES * 1000))
            for _ in range(_PIECES):
                time.sleep(0.05)
                conn.sendall(b"3e8\r\n" + _PIECE + b"\r\n" if chunked else _PIECE)
            if chunked:
                conn.sendall(b"0\r\n\r\n")
            done.wait(10)

    threading.Thread(target=serve, daemon=True).start()
    return sock, f"http://127.0.0.1:{sock.getsockname()[1]}", done


@pytest.mark.parametrize("chunked", [False, True], ids=["length", "chunked"])
def test_a_body_sent_steadily_for_longer_than_the_timeout_is_relayed_whole(
    chunked: bool,
) -> None:
    sock, url, done = _trickle(chunked)
    try:
        # Each silence is 50 ms, ten times less than the timeout; the whole body, 750 ms.
        with LatencyProxy(url, upstream_timeout_s=0.5) as proxy:
            conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10)
            try:
                conn.request("GET", "/bucket/big")
                resp = conn.getresponse()
                assert (resp.status, resp.read()) == (200, _PIECE * _PIECES)
            finally:
                conn.close()
    finally:
        done.set()
        sock.close()
