"""LatencyProxy when the upstream or the client fails: real sockets on 127.0.0.1.

Every upstream failure that happens before the proxy has sent the client a byte
is answered ``502 Bad Gateway`` with a body naming the upstream and the problem,
and no failure leaves a proxy task, an upstream socket or a thread behind.
"""

from __future__ import annotations

import http.client
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from headrace.emulate import LatencyProxy, ProxyStats
from headrace.errors import StorageError


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def _get(port: int, path: str = "/bucket/key") -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


class _Upstream:
    """A one-request-at-a-time TCP server on 127.0.0.1 that answers with ``reply(conn)``."""

    def __init__(self, reply: Callable[[socket.socket], None]) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self._reply = reply
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return  # closed
            with conn:
                conn.recv(65536)
                self._reply(conn)

    def close(self) -> None:
        # shutdown wakes the accept() in the serving thread; close alone may not.
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self.thread.join(timeout=5)
        assert not self.thread.is_alive()


def _through_proxy(reply: Callable[[socket.socket], None]) -> tuple[str, int, bytes, ProxyStats]:
    """One GET through a proxy to an upstream that answers with ``reply(conn)``: the
    upstream's URL, the status and body the client got, and the proxy's counters after."""
    upstream = _Upstream(reply)
    try:
        with LatencyProxy(upstream.url) as proxy:
            status, body = _get(proxy.port)
    finally:
        upstream.close()
    return upstream.url, status, body, proxy.stats


def _reset(conn: socket.socket) -> None:
    # SO_LINGER 0: close() sends RST, as a crashed or killed server's kernel does.
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")


@pytest.fixture
def no_leaks() -> Iterator[None]:
    threads = set(threading.enumerate())
    fds = _open_fds()
    yield
    leaked_threads = [t for t in set(threading.enumerate()) - threads if t.is_alive()]
    assert not leaked_threads, leaked_threads
    # The fds this test opened, and only those, are gone (other fds may come and go in
    # pytest itself, so compare against the set before, not a count).
    leaked_fds = _open_fds() - fds
    assert not leaked_fds, leaked_fds


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # nothing listens here once it is closed


@pytest.mark.usefixtures("no_leaks")
def test_refused_upstream_is_a_502_naming_it() -> None:
    upstream = f"http://127.0.0.1:{_closed_port()}"
    with LatencyProxy(upstream) as proxy:
        status, body = _get(proxy.port)
    assert proxy.stats.in_flight == 0
    assert status == 502
    assert body.decode() == f"upstream {upstream} could not be reached: Connection refused"


@pytest.mark.usefixtures("no_leaks")
def test_unresolvable_upstream_is_a_502_not_a_traceback(
    capfd: pytest.CaptureFixture[str],
) -> None:
    with LatencyProxy("http://no-such-host.invalid:80") as proxy:
        status, body = _get(proxy.port)
    assert status == 502
    assert body.startswith(b"upstream http://no-such-host.invalid:80 could not be reached: ")
    # asyncio used to print "Unhandled exception in client_connected_cb" and a traceback.
    assert "Traceback" not in capfd.readouterr().err


@pytest.mark.usefixtures("no_leaks")
def test_upstream_closing_without_an_answer_is_a_502() -> None:
    url, status, body, _ = _through_proxy(lambda conn: None)
    assert status == 502
    assert body.decode() == f"upstream {url} closed the connection without a response"


@pytest.mark.parametrize(
    ("reset", "problem"),
    [
        (True, "Connection reset by peer"),
        (False, "300 bytes read on a total of 1000 expected bytes"),
    ],
)
@pytest.mark.usefixtures("no_leaks")
def test_upstream_gone_mid_body_is_a_502_saying_what_happened(reset: bool, problem: str) -> None:
    def half(conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + b"x" * 300)
        if reset:
            _reset(conn)

    url, status, body, stats = _through_proxy(half)
    assert status == 502
    assert body.decode() == f"upstream {url} failed in the middle of its response body: {problem}"
    assert stats.in_flight == 0 and stats.bytes_down == 0


@pytest.mark.usefixtures("no_leaks")
def test_upstream_reset_mid_head_is_a_502() -> None:
    def partial_head(conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Len")
        _reset(conn)

    url, status, body, _ = _through_proxy(partial_head)
    assert status == 502
    assert body.decode() == f"upstream {url} failed before its response: Connection reset by peer"


@pytest.mark.usefixtures("no_leaks")
def test_malformed_upstream_head_is_a_502() -> None:
    _, status, body, _ = _through_proxy(
        lambda conn: conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: lots\r\n\r\n")
    )
    assert status == 502
    assert b"malformed response head" in body and b"lots" in body


@pytest.mark.usefixtures("no_leaks")
def test_client_gone_mid_response_frees_its_slot_and_the_proxy_serves_on() -> None:
    big = b"y" * (8 * 1024 * 1024)  # far more than the socket buffers hold

    def large(conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(big) + big)

    upstream = _Upstream(large)
    try:
        # The bandwidth cap keeps the proxy writing for seconds, so the client is
        # certainly gone while the response is still being sent.
        with LatencyProxy(upstream.url, mbps=4) as proxy:
            client = socket.create_connection(("127.0.0.1", proxy.port), timeout=10)
            client.sendall(b"GET /k HTTP/1.1\r\nHost: x\r\n\r\n")
            assert client.recv(4096).startswith(b"HTTP/1.1 200")
            _reset(client)
            client.close()
            deadline = time.monotonic() + 10  # a bound on hanging, not a speed check
            while proxy.stats.in_flight and time.monotonic() < deadline:
                time.sleep(0.01)
            assert proxy.stats.in_flight == 0
            assert not proxy._tasks  # the connection's task ended
            upstream._reply = lambda conn: conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
            )
            assert _get(proxy.port) == (200, b"ok")
    finally:
        upstream.close()


@pytest.mark.usefixtures("no_leaks")
def test_a_port_in_use_is_a_storage_error_naming_it() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        proxy = LatencyProxy("http://127.0.0.1:9", port=port)
        with pytest.raises(
            StorageError, match=rf"cannot listen on 127\.0\.0\.1:{port}: Address already in use$"
        ):
            proxy.start()
        proxy.close()  # nothing to stop: no error


@pytest.mark.parametrize(
    ("sent", "status"),
    [
        (b"GET /k HTTP/1.1\r\nHost: x\r\n", None),  # the head cut short, then the client is gone
        (b"GET /k HTTP/1.1\r\nX-Big: " + b"z" * (70 * 1024) + b"\r\n\r\n", b"431"),  # 70 KiB
        (b"PUT /k HTTP/1.1\r\nContent-Length: ten\r\n\r\n", b"400"),
    ],
    ids=["partial-head", "head-too-large", "bad-length"],
)
@pytest.mark.usefixtures("no_leaks")
def test_a_bad_client_request_is_answered_and_closes_only_that_connection(
    sent: bytes, status: bytes | None
) -> None:
    upstream = _Upstream(
        lambda conn: conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    )
    try:
        with LatencyProxy(upstream.url) as proxy:
            with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as client:
                client.sendall(sent)
                client.shutdown(socket.SHUT_WR)
                answer = b""
                while chunk := client.recv(65536):
                    answer += chunk
            if status is None:
                assert answer == b""  # closed: nothing to answer, nothing forwarded
            else:
                # Answered with the reason, then closed; nothing forwarded.
                assert answer.startswith(b"HTTP/1.1 " + status), answer[:200]
                assert b"Connection: close" in answer
                reason = answer.partition(b"\r\n\r\n")[2]
                assert (b"64 KiB" if status == b"431" else b"malformed") in reason
            assert _get(proxy.port) == (200, b"ok")  # the proxy serves on
            assert proxy.stats.requests == 1
    finally:
        upstream.close()


def test_the_port_of_a_proxy_not_started_is_a_clear_error() -> None:
    with pytest.raises(RuntimeError, match=r"proxy is not running; call start\(\) first"):
        _ = LatencyProxy("http://127.0.0.1:9").port


@pytest.mark.usefixtures("no_leaks")
@pytest.mark.parametrize(
    ("sent", "said"),
    [
        (b"", "sent no response within 0.2 s"),  # reads the request, never answers
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + b"x" * 300,
            "sent only part of its response body within 0.2 s",
        ),
    ],
    ids=["before its head", "mid-body"],
)
def test_an_upstream_gone_silent_is_a_504_naming_the_wait(sent: bytes, said: str) -> None:
    release = threading.Event()

    def stall(conn: socket.socket) -> None:
        conn.sendall(sent)
        release.wait(10)  # silent, connection open, until the test is done

    upstream = _Upstream(stall)
    try:
        with LatencyProxy(upstream.url, upstream_timeout_s=0.2) as proxy:
            status, body = _get(proxy.port)
    finally:
        release.set()
        upstream.close()
    assert status == 504
    assert body.decode() == f"upstream {upstream.url} {said}"


@pytest.mark.usefixtures("no_leaks")
def test_closing_the_proxy_mid_request_closes_both_sides() -> None:
    release = threading.Event()
    upstream = _Upstream(lambda conn: release.wait(10))  # accepts, reads, never answers
    try:
        proxy = LatencyProxy(upstream.url).start()  # 30 s upstream timeout: close must not wait
        thread = proxy._thread
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as client:
            client.sendall(b"GET /k HTTP/1.1\r\nHost: x\r\n\r\n")
            deadline = time.monotonic() + 10
            while not proxy.stats.in_flight and time.monotonic() < deadline:
                time.sleep(0.01)
            assert proxy.stats.in_flight == 1
            proxy.close()
            assert client.recv(4096) == b""  # the client's connection is closed too
        assert thread is not None and not thread.is_alive()
        assert proxy.stats.in_flight == 0
    finally:
        release.set()
        upstream.close()


def _proxy_cli(*args: str) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parents[2] / "src"))
    return subprocess.Popen(
        # As benchmarks/s3_getmany.py runs it (-m would warn: the package imports it).
        [
            sys.executable,
            "-c",
            "import sys; from headrace.emulate._proxy import main; sys.exit(main())",
            *args,
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_the_proxy_command_refuses_a_port_in_use_with_a_line() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        proc = _proxy_cli("--upstream", "http://127.0.0.1:9", "--port", str(port))
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 2
    assert err == (
        f"headrace-proxy: LatencyProxy: cannot listen on 127.0.0.1:{port}: Address already in use\n"
    )
    assert "Traceback" not in err and out == ""


def test_the_proxy_command_relays_a_dead_upstream_as_502_and_stops_on_sigterm() -> None:
    upstream = f"http://127.0.0.1:{_closed_port()}"
    proc = _proxy_cli("--upstream", upstream)
    try:
        assert proc.stdout is not None
        endpoint = proc.stdout.readline().strip()
        assert endpoint.startswith("http://127.0.0.1:")
        status, body = _get(int(endpoint.rsplit(":", 1)[1]))
        assert (status, body.decode()) == (
            502,
            f"upstream {upstream} could not be reached: Connection refused",
        )
        proc.send_signal(signal.SIGTERM)  # the process this test started, by PID
        out, err = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "requests=1 connections=1 faults=0 bytes_down=0" in out
