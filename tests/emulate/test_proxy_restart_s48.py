"""A LatencyProxy started again after close(): it serves again, and closes again.

``start()`` waited on the event it had set the first time, so it returned at once,
before the new event loop was up: ``port`` read the closed server (IndexError or the
old port), and a ``close()`` that came before the loop was up found the old, closed
loop, sent nothing and waited for the new thread for good.
"""

from __future__ import annotations

import http.client
import threading

import pytest

from headrace.emulate import LatencyProxy


def _status(port: int) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/bucket/key")
        return conn.getresponse().status
    finally:
        conn.close()


def test_a_closed_proxy_starts_serves_and_closes_again() -> None:
    proxy = LatencyProxy("http://127.0.0.1:9")  # nothing there: the proxy answers 502
    got: list[object] = []

    def go() -> None:
        try:
            for _ in range(20):
                with proxy:
                    got.append(_status(proxy.port))
        except BaseException as exc:  # reported to the test
            got.append(exc)

    before = set(threading.enumerate())
    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    thread.join(60)  # a bound on hanging, not a speed check
    assert not thread.is_alive(), "close() waited for good"
    assert got == [502] * 20
    assert not [t for t in set(threading.enumerate()) - before if t.is_alive()]


def test_the_port_of_a_closed_proxy_says_it_is_not_running() -> None:
    proxy = LatencyProxy("http://127.0.0.1:9")
    with proxy:
        assert proxy.port > 0
    with pytest.raises(RuntimeError, match=r"proxy is not running; call start\(\) first"):
        _ = proxy.port
