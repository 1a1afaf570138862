"""Edges of the emulators met while rehearsing slow storage: real sockets on 127.0.0.1.

* ``Expect: 100-continue``: botocore sends it with every PutObject and UploadPart, and
  waits (1 s) for ``100 Continue`` before it sends the body. Until 2026-12-06 the proxy
  waited for the body first, so each upload through it took a second more; and the
  store's own ``100 Continue`` (moto sends two) was taken for the answer, its "body"
  read to the end of the connection: a store that keeps connections open (MinIO) got the
  client a 504 after ``upstream_timeout_s``.
* A ``short`` fault on a chunked answer counted as injected but relayed the whole body.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import socket
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from headrace.emulate import FaultRule, LatencyProxy, SlowFSConfig, _slowfs
from headrace.emulate._slowfs_stats import SlowFSStats
from headrace.errors import ConfigError

_WORDS = b"hello, slow world"


class _Store:
    """Serves many requests a connection and keeps it open, as S3 and MinIO do. A request
    that says ``Expect: 100-continue`` gets ``100 Continue`` twice before its body is read
    (as moto answers it); a PUT is answered with its body, a GET of ``/chunked`` with
    ``_WORDS`` in three chunks, any other GET with ``_WORDS`` by Content-Length."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return  # closed
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            t.start()
            self._threads.append(t)

    def _serve(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rb") as f:
            while line := f.readline():
                method, path = line.split(b" ")[:2]
                headers = {}
                while (header := f.readline()) not in (b"\r\n", b""):
                    name, _, value = header.partition(b":")
                    headers[name.strip().lower()] = value.strip().lower()
                if headers.get(b"expect") == b"100-continue":
                    conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n" * 2)
                body = f.read(int(headers.get(b"content-length", b"0")))
                if method == b"PUT":
                    conn.sendall(
                        b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body
                    )
                elif path == b"/chunked":
                    chunks = (_WORDS[:5], _WORDS[5:12], _WORDS[12:])
                    framed = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks)
                    conn.sendall(
                        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                        + framed
                        + b"0\r\n\r\n"
                    )
                else:
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(_WORDS))
                    conn.sendall(_WORDS)

    def close(self) -> None:
        self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()


@pytest.fixture
def store() -> Iterator[_Store]:
    s = _Store()
    yield s
    s.close()


def _read_head(sock: socket.socket) -> bytes:
    got = b""
    while b"\r\n\r\n" not in got:
        chunk = sock.recv(1)
        if not chunk:
            break
        got += chunk
    return got


def test_expect_100_continue_is_answered_before_the_body_and_the_answer_relayed(
    store: _Store,
) -> None:
    with LatencyProxy(store.url, upstream_timeout_s=2.0) as proxy:
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as sock:
            sock.sendall(
                b"PUT /bucket/key HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
                b"Expect: 100-continue\r\n\r\n"
            )
            # A client waits for this before it sends the body (botocore: 1 s at most).
            sock.settimeout(0.5)
            interim = _read_head(sock)
            assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
            sock.settimeout(5)
            sock.sendall(b"12345")
            resp = http.client.HTTPResponse(sock)
            resp.begin()
            # The store's own 100s are not the answer: its 200, with the body it echoed.
            assert (resp.status, resp.read()) == (200, b"12345")
    assert proxy.stats.requests == 1


def test_expect_100_continue_through_http_client_keeps_the_connection(store: _Store) -> None:
    # http.client sends the body at once, without waiting for the 100: the proxy's 100 is
    # then an interim answer the client skips, and the connection serves the next request.
    with LatencyProxy(store.url, upstream_timeout_s=2.0) as proxy:
        conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=5)
        conn.request("PUT", "/bucket/key", body=b"abc", headers={"Expect": "100-continue"})
        first = conn.getresponse()
        assert (first.status, first.read()) == (200, b"abc")
        conn.request("GET", "/bucket/key")
        second = conn.getresponse()
        assert (second.status, second.read()) == (200, _WORDS)
        conn.close()


@pytest.mark.parametrize("path", ["/plain", "/chunked"])
def test_a_short_fault_cuts_the_body_whatever_its_framing(store: _Store, path: str) -> None:
    # "short": half the body, framed so that it looks complete (a server that lies
    # consistently). A chunked answer was relayed whole while counted as a fault.
    with LatencyProxy(store.url, faults=[FaultRule(kind="short")]) as proxy:
        conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=5)
        t0 = time.monotonic()
        conn.request("GET", path)
        resp = conn.getresponse()
        got = (resp.status, resp.read())
        conn.close()
    assert got == (200, _WORDS[: len(_WORDS) // 2])
    assert time.monotonic() - t0 < 2
    assert proxy.stats.faults_by_kind == {"short": 1}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        # NaN passed the ">= 0" checks: a NaN latency injected none, an infinite one
        # hung every request, a NaN mbps paced nothing.
        ({"latency_ms": float("nan")}, r"latency_ms must be a finite number >= 0 \(got nan\)"),
        ({"latency_ms": float("inf")}, r"latency_ms must be a finite number >= 0 \(got inf\)"),
        ({"mbps": float("nan")}, r"mbps must be a finite number > 0 or None \(got nan\)"),
        ({"mbps": float("inf")}, r"mbps must be a finite number > 0 or None \(got inf\)"),
    ],
)
def test_a_proxy_setting_that_is_not_finite_is_refused_naming_it(
    kwargs: dict[str, float], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        LatencyProxy("http://127.0.0.1:9", **kwargs)  # type: ignore[arg-type]


def test_a_file_removed_while_its_folder_is_listed_is_left_out_not_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A job writing beside the data (checkpoints, a shard being replaced) removes a file
    # between the listing and the type of its entry: the whole READDIR failed with ENOENT
    # (os.walk, ls and ImageFolder saw the folder fail), where NFS answers the listing.
    root = tmp_path / "src"
    root.mkdir()
    for name in ("a", "gone", "z"):
        (root / name).write_bytes(b"x")
    os.mkfifo(root / "pipe")  # no d_type shortcut for it: its type comes from lstat
    real_scandir = os.scandir

    @contextlib.contextmanager
    def scandir_then_remove(path: str) -> Iterator[list[os.DirEntry[str]]]:
        with real_scandir(path) as it:
            entries = list(it)
        (root / "gone").unlink()  # listed, then removed before its type is asked
        yield entries

    monkeypatch.setattr(_slowfs.os, "scandir", scandir_then_remove)
    ops = _slowfs.SlowPassthrough(
        str(root), SlowFSConfig(), SlowFSStats(None, interval_s=1, header={})
    )
    listed = [(name, stat.S_IFMT(attrs["st_mode"])) for name, attrs, _ in ops.readdir("/", 0)]
    assert listed == [
        (".", stat.S_IFDIR),
        ("..", stat.S_IFDIR),
        ("a", stat.S_IFREG),
        ("gone", stat.S_IFREG),  # as the listing saw it, by its d_type, as NFS lists
        ("pipe", stat.S_IFIFO),
        ("z", stat.S_IFREG),
    ]
    assert ops.stats.snapshot()["listings"] == 1
