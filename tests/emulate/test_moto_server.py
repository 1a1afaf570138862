"""LocalS3 runs moto's server through ``headrace.emulate._moto_server``: moto's module
listing taken once instead of per request, werkzeug's request lines not logged, a GET of
one range reads that range of the object, not all of it, and answers as moto did, and a
connection that sent no body is kept open for the next request, its answers sent without
waiting for the client's acknowledgement of the last."""

from __future__ import annotations

import http.client
import logging
import os
import threading
from collections.abc import Iterator

import numpy as np
import pytest

from headrace.emulate import LocalS3
from headrace.emulate._moto_server import _one_range, _Range, patch_moto


@pytest.fixture(autouse=True)
def _unpatched(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """What patch_moto replaces in this process, put back after each test."""
    models = pytest.importorskip("moto.s3.models")
    responses = pytest.importorskip("moto.s3.responses")
    monkeypatch.setattr(models.FakeKey, "value", models.FakeKey.__dict__["value"])
    get_object = responses.S3Response.__dict__["get_object"]
    monkeypatch.setattr(responses.S3Response, "get_object", get_object)
    serving = pytest.importorskip("werkzeug.serving")
    monkeypatch.setattr(serving, "selectors", serving.selectors)
    for name in ("run_wsgi", "send_header", "disable_nagle_algorithm"):
        monkeypatch.setattr(
            serving.WSGIRequestHandler, name, getattr(serving.WSGIRequestHandler, name)
        )
    yield


def test_local_s3_runs_the_patched_server() -> None:
    argv = list(LocalS3()._server._argv(12345))
    assert "headrace.emulate._moto_server" in argv
    assert "moto.server" not in argv
    assert argv[-4:] == ["-H", "127.0.0.1", "-p", "12345"]


def test_moto_lists_its_modules_once(monkeypatch: pytest.MonkeyPatch) -> None:
    backends = pytest.importorskip("moto.backends")
    # Restored after the test: the patch below replaces moto's function in this process.
    monkeypatch.setattr(backends, "list_of_moto_modules", backends.list_of_moto_modules)
    monkeypatch.setattr(logging.getLogger("werkzeug"), "level", logging.NOTSET)
    expected = set(backends.list_of_moto_modules())
    assert "s3" in expected

    patch_moto()

    listed = []
    real_listdir = os.listdir

    def listdir(path: str) -> list[str]:
        listed.append(path)
        return real_listdir(path)

    monkeypatch.setattr(os, "listdir", listdir)
    for _ in range(3):  # what the dispatcher does for each request
        assert "s3" in backends.list_of_moto_modules()
        assert "s3.us-east-1.amazonaws.com" not in backends.list_of_moto_modules()
    assert set(backends.list_of_moto_modules()) == expected
    assert listed == [], f"moto listed its folder again: {listed}"
    assert logging.getLogger("werkzeug").level == logging.WARNING


def test_a_moto_without_the_listing_is_served_unpatched(monkeypatch: pytest.MonkeyPatch) -> None:
    # A later moto that moved list_of_moto_modules: the server starts as moto's own
    # (only slower), where the patch raised AttributeError and no S3 test could start.
    backends = pytest.importorskip("moto.backends")
    monkeypatch.delattr(backends, "list_of_moto_modules")
    monkeypatch.setattr(logging.getLogger("werkzeug"), "level", logging.NOTSET)
    patch_moto()
    assert not hasattr(backends, "list_of_moto_modules")
    assert logging.getLogger("werkzeug").level == logging.WARNING


def test_a_werkzeug_without_its_selectors_closes_connections_as_before(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The kept connection relies on werkzeug.serving's drain going through its module's
    # `selectors`; a werkzeug that drains otherwise is left as it is (each connection
    # closed after its response), not patched half-way into reading a next request.
    serving = pytest.importorskip("werkzeug.serving")
    handler = serving.WSGIRequestHandler
    run_wsgi, send_header = handler.run_wsgi, handler.send_header
    monkeypatch.delattr(serving, "selectors")
    patch_moto()
    assert (handler.run_wsgi, handler.send_header) == (run_wsgi, send_header)
    assert not hasattr(serving, "selectors")


def test_which_ranges_are_read_alone() -> None:
    for one in ["bytes=0-0", "bytes=5-9", "bytes=7-", "bytes=-100", "bytes=3-3"]:
        assert _one_range(one), one
    # moto answers these with the whole object: read whole
    for other in [None, "", "bytes=-", "bytes=9-3", "bytes=0-1,5-6", "bytes=a-b", "items=0-1"]:
        assert not _one_range(other), other


def test_a_range_reads_its_bytes_only() -> None:
    models = pytest.importorskip("moto.s3.models")
    data = np.random.default_rng(1).integers(0, 256, 6 << 20, dtype=np.uint8).tobytes()
    key = models.FakeKey("k", data, account_id="123456789012", region_name="us-east-1")
    reads: list[int] = []
    buffer = key._value_buffer
    real_read = buffer.read

    def read(n: int = -1) -> bytes:
        got = real_read(n)
        reads.append(len(got))
        return bytes(got)

    buffer.read = read
    value = _Range(key)
    assert len(value) == len(data) and value
    assert value[100:65636] == data[100:65636]
    assert value[len(data) - 5 : len(data) + 10] == data[-5:]
    assert reads == [65536, 5]
    assert not _Range(models.FakeKey("e", b"", account_id="123456789012", region_name="x"))


def test_ranged_gets_answer_as_moto_did() -> None:
    # A real server and a real S3 client (boto3), an object past moto's 5 MiB in-memory
    # buffer (kept in a temporary file): every range form, and those moto answers whole.
    pytest.importorskip("moto")
    data = np.random.default_rng(2).integers(0, 256, (6 << 20) + 123, dtype=np.uint8).tobytes()
    n = len(data)
    with LocalS3() as server:
        server.create_bucket("ranges")
        client = server.info.boto3_client()
        client.put_object(Bucket="ranges", Key="big", Body=data)
        for rng, want in [
            ("bytes=0-0", data[:1]),
            ("bytes=100-65635", data[100:65636]),
            ("bytes=5242870-5242900", data[5242870:5242901]),
            (f"bytes={n - 10}-", data[-10:]),
            ("bytes=-1000", data[-1000:]),
            (f"bytes={n - 3}-{n + 50}", data[-3:]),
        ]:
            got = client.get_object(Bucket="ranges", Key="big", Range=rng)
            assert got["ResponseMetadata"]["HTTPStatusCode"] == 206, rng
            assert got["Body"].read() == want, rng
            first = n - len(want)
            if rng.startswith("bytes=") and rng[6] != "-" and not rng.endswith("-"):
                first = int(rng[6:].split("-")[0])
            assert got["ContentRange"] == f"bytes {first}-{first + len(want) - 1}/{n}", rng
        for whole in ["bytes=9-3", "bytes=0-1,5-6"]:
            got = client.get_object(Bucket="ranges", Key="big", Range=whole)
            assert got["ResponseMetadata"]["HTTPStatusCode"] == 200, whole
            assert got["Body"].read() == data, whole
        assert client.get_object(Bucket="ranges", Key="big")["Body"].read() == data
        part = client.get_object(Bucket="ranges", Key="big", PartNumber=1)
        assert part["ResponseMetadata"]["HTTPStatusCode"] == 206
        assert part["Body"].read() == data
        with pytest.raises(client.exceptions.ClientError, match="InvalidRange"):
            client.get_object(Bucket="ranges", Key="big", Range=f"bytes={n}-")


def test_a_connection_without_a_request_body_is_kept_for_the_next_request() -> None:
    # werkzeug answered every request with "Connection: close": a new connection and a new
    # server thread for each GET. Kept open, one connection serves them all, as S3's do;
    # a request with a body still closes its connection (its body could be left unread).
    pytest.importorskip("moto")
    data = np.random.default_rng(3).integers(0, 256, 100_000, dtype=np.uint8).tobytes()
    with LocalS3() as server:
        server.create_bucket("kept")
        port = int(server.endpoint.rsplit(":", 1)[1])
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            conn.request("PUT", "/kept/k", body=data, headers={"x-amz-acl": "public-read"})
            put = conn.getresponse()
            put.read()
            assert put.status == 200 and put.getheader("Connection") == "close"
            conn.close()
            sockets = set()
            for i in range(5):
                conn.request("GET", "/kept/k", headers={"Range": f"bytes={i}-{i + 99}"})
                got = conn.getresponse()
                assert (got.status, got.read()) == (206, data[i : i + 100]), i
                assert got.getheader("Connection") is None and not got.will_close, i
                sockets.add(id(conn.sock))
            conn.request("HEAD", "/kept/k")
            head = conn.getresponse()
            head.read()
            assert head.status == 200 and head.getheader("Content-Length") == str(len(data))
            conn.request("GET", "/kept/missing")
            missing = conn.getresponse()
            assert missing.status == 404 and b"NoSuchKey" in missing.read()
            sockets.add(id(conn.sock))
            assert len(sockets) == 1, "a new connection for a request after the first"
        finally:
            conn.close()


def test_a_kept_connection_sends_its_answers_at_once() -> None:
    # Kept open, a connection's second answer waited for the client's delayed ACK: werkzeug
    # writes a response's head and body apart, and Nagle's algorithm holds the body until
    # the head is acknowledged, which Linux delays up to 40 ms. A ranged GET took 44 ms,
    # 2.6 with TCP_NODELAY on the server's sockets, as a HEAD did (2c, 2026-12-06).
    import socket

    serving = pytest.importorskip("werkzeug.serving")
    patch_moto()

    def app(environ: dict[str, object], start_response: object) -> list[bytes]:
        sock = environ["werkzeug.socket"]
        assert isinstance(sock, socket.socket)
        nodelay = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        start_response("200 OK", [("Content-Length", "1")])  # type: ignore[operator]
        return [b"1" if nodelay else b"0"]

    server = serving.make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        conn.request("GET", "/")
        assert conn.getresponse().read() == b"1", "the server's socket delays small writes"
        conn.close()
    finally:
        server.shutdown()
        thread.join()
