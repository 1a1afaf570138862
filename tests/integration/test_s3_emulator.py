"""The fault proxy and the ``headrace emulate s3`` entry point, on 127.0.0.1 only."""

from __future__ import annotations

import argparse
import ast
import http.client
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from s3util import BUCKET, PREFIX, S3Fixture, expected

from headrace.emulate import FaultRule, LatencyProxy, LocalS3
from headrace.emulate._s3 import configure_s3, run_s3
from headrace.emulate._server import ServerProcess
from headrace.errors import ConfigError
from headrace.io import ObjectStore

pytestmark = pytest.mark.integration


class _Echo(BaseHTTPRequestHandler):
    """Answers every request with its path and body; keep-alive, like a real store."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # else a kept connection's answers wait ~40 ms for an ACK

    def _answer(self, body: bytes) -> None:
        payload = self.path.encode() + b"|" + body
        self.send_response(200)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def do_GET(self) -> None:
        self._answer(b"")

    def do_PUT(self) -> None:
        if self.headers.get("Transfer-Encoding") == "chunked":
            body = b""
            while True:
                size = int(self.rfile.readline().strip(), 16)
                if size == 0:
                    self.rfile.readline()  # the empty line after the last chunk
                    break
                body += self.rfile.read(size + 2)[:size]
        else:
            body = self.rfile.read(int(self.headers["Content-Length"]))
        self._answer(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def echo() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join()


def _get(conn: http.client.HTTPConnection, path: str) -> tuple[int, bytes]:
    conn.request("GET", path)
    resp = conn.getresponse()
    return resp.status, resp.read()


def test_relays_requests_on_one_connection(echo: str) -> None:
    with LatencyProxy(echo) as proxy:
        conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=5)
        for i in range(5):
            assert _get(conn, f"/k{i}") == (200, f"/k{i}|".encode())
        conn.request("PUT", "/up", body=b"x" * 100_000)
        resp = conn.getresponse()
        assert resp.read() == b"/up|" + b"x" * 100_000
        conn.request("PUT", "/chunked", body=iter([b"ab", b"cde"]), encode_chunked=True)
        assert conn.getresponse().read() == b"/chunked|abcde"
        conn.close()
        stats = proxy.stats
    assert stats.requests == 7
    assert stats.connections == 1
    assert stats.faults == 0
    assert stats.bytes_up > 100_000
    assert stats.bytes_down > 100_000


def test_fault_schedules(echo: str) -> None:
    rules = [
        FaultRule(status=503, match="/a", every=2),
        FaultRule(status=500, match="/b", limit=1),
        FaultRule(status=429, match="/c", fraction=0.5, seed=7),
    ]
    with LatencyProxy(echo, faults=rules) as proxy:
        statuses: dict[str, list[int]] = {}
        for name in ("/a", "/b", "/c"):
            for _ in range(20):
                conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=5)
                statuses.setdefault(name, []).append(_get(conn, name)[0])
                conn.close()
        stats = proxy.stats
    assert statuses["/a"] == [200, 503] * 10
    assert statuses["/b"] == [500] + [200] * 19
    assert 3 <= statuses["/c"].count(429) <= 17
    assert set(statuses["/c"]) == {200, 429}
    assert stats.faults == 10 + 1 + statuses["/c"].count(429)
    assert stats.faults_by_kind["status:503"] == 10


def test_drop_and_latency(echo: str) -> None:
    with LatencyProxy(echo, latency_ms=5, faults=[FaultRule(kind="drop", limit=1)]) as proxy:
        conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=5)
        with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
            _get(conn, "/x")
        conn.close()
        conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=5)
        assert _get(conn, "/x") == (200, b"/x|")
        conn.close()
        assert proxy.stats.faults_by_kind == {"drop": 1}


def test_close_stops_thread_and_port(echo: str) -> None:
    proxy = LatencyProxy(echo).start()
    thread = proxy._thread
    assert thread is not None and thread.is_alive()
    port = proxy.port
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    assert _get(conn, "/open")[0] == 200  # leaves a keep-alive connection open
    proxy.close()
    proxy.close()
    conn.close()
    # This proxy's own thread, not a count: other tests' pools may start or end
    # threads meanwhile.
    assert not thread.is_alive()
    with pytest.raises(ConnectionRefusedError):
        http.client.HTTPConnection("127.0.0.1", port, timeout=5).request("GET", "/")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"kind": "explode"}, "Fault kind"),
        ({"every": 0}, "every"),
        ({"fraction": 1.5}, "fraction"),
        ({"limit": -1}, "limit"),
        ({"status": 42}, "status"),
    ],
)
def test_bad_fault_rules(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        FaultRule(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("upstream", "kwargs", "message"),
    [
        ("https://x:1", {}, "http://host:port"),
        ("http://127.0.0.1:1", {"latency_ms": -1}, "latency_ms"),
        ("http://127.0.0.1:1", {"mbps": 0}, "mbps"),
        ("http://127.0.0.1:1", {"max_concurrent": 0}, r"max_concurrent must be >= 1"),
    ],
)
def test_bad_proxy_options(upstream: str, kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        LatencyProxy(upstream, **kwargs)  # type: ignore[arg-type]


def test_run_s3_requires_a_reason_for_endpoint() -> None:
    parser = argparse.ArgumentParser()
    configure_s3(parser)
    with pytest.raises(ConfigError, match="--endpoint only makes sense"):
        run_s3(parser.parse_args(["--endpoint", "http://127.0.0.1:1"]))


@pytest.mark.parametrize("bucket", ["b", "My_Data", "-data", "data-", "a" * 64, "x..y"])
def test_run_s3_refuses_a_bucket_name_s3_refuses_before_starting(bucket: str) -> None:
    # `--bucket b` started moto, then ended in botocore's InvalidBucketName traceback.
    from headrace.cli import main

    parser = argparse.ArgumentParser()
    configure_s3(parser)
    with pytest.raises(ConfigError, match=rf"--bucket {bucket!r} is not a valid S3 bucket name"):
        run_s3(parser.parse_args([f"--bucket={bucket}"]))
    assert main(["emulate", "s3", f"--bucket={bucket}"]) == 2


def test_run_s3_in_front_of_an_endpoint(s3: S3Fixture) -> None:
    # The CLI entry in a subprocess, in front of the session's moto: prints where it is,
    # serves through the proxy, and stops cleanly on SIGTERM.
    code = (
        "import argparse, sys\n"
        "from headrace.emulate._s3 import configure_s3, run_s3\n"
        "p = argparse.ArgumentParser(); configure_s3(p)\n"
        "sys.exit(run_s3(p.parse_args(sys.argv[1:])))\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "--endpoint", s3.server.endpoint, "--latency-ms", "1"],
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
    )
    try:
        assert proc.stdout is not None
        endpoint, printed, environment, proxy, credentials = "", "", "", "", ""
        for line in proc.stdout:
            assert "testing" not in line
            if line.startswith("credentials:"):
                credentials = line.split(":", 1)[1].strip()
            if line.startswith("proxy at "):
                proxy = line.partition(": ")[2].strip()
            if line.startswith("endpoint:"):
                endpoint = line.split()[1]
            if line.startswith("store_options:"):
                printed = line.split(":", 1)[1].strip()
            if line.startswith("environment:"):
                environment = line.split(":", 1)[1].strip()
            if "Ctrl-C" in line:
                break
        assert endpoint.startswith("http://127.0.0.1:")
        # In words (it read "cap none MB/s, at most any number of requests at once").
        assert proxy == (
            "1 ms added to each request, no bandwidth cap, no limit on requests at once"
        )
        # The printed store_options, with the upstream's keys added, read through it. The
        # upstream's keys are not the emulator's: moto's 'testing' were printed, for any
        # upstream (fails before: an 'access key id: testing' line, the export line).
        assert printed.endswith(
            ", with the upstream's access_key_id, secret_access_key and region added"
        )
        options = ast.literal_eval(printed.partition("}")[0] + "}")
        assert options == {"endpoint": endpoint, "path_style": True, "allow_http": True}
        upstream_keys = {k: v for k, v in s3.server.info.store_options().items() if k != "endpoint"}
        with ObjectStore(f"s3://{BUCKET}/{PREFIX}", **{**upstream_keys, **options}) as store:
            assert bytes(store.get("small/000.bin")) == expected("small/000.bin")
        assert environment == (
            f"AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_REGION as for {s3.server.endpoint}"
        )
        assert credentials == f"{s3.server.endpoint}'s own (the proxy forwards requests as signed)"
        os.kill(proc.pid, signal.SIGTERM)
        out, _ = proc.communicate(timeout=10)
        assert proc.returncode == 0
        assert "proxy: 1 requests" in out
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


def test_local_s3_stops_by_pid() -> None:
    with LocalS3() as server:
        pid = server.pid
        assert pid is not None
        server.create_bucket("twice")
        server.create_bucket("twice")  # already ours: not an error
        names = [b["Name"] for b in server.info.boto3_client().list_buckets()["Buckets"]]
        assert "twice" in names
    assert server.pid is None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_local_s3_dies_with_its_parent(pid_exited: Callable[[int], bool]) -> None:
    script = (
        "import time\n"
        "from headrace.emulate import LocalS3\n"
        "print(LocalS3().start().pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, env=env)
    assert parent.stdout is not None
    pid = int(parent.stdout.readline())
    try:
        parent.kill()  # no finally, no atexit: only the lifeline pipe can stop moto
        parent.communicate()  # reaps it and closes our end of its stdout
        deadline = time.monotonic() + 15  # a bound on hanging, not a speed check
        while not pid_exited(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert pid_exited(pid), "moto outlived its parent"
    finally:
        if not pid_exited(pid):
            os.kill(pid, signal.SIGKILL)


def test_local_s3_interrupted_while_starting_leaves_no_server(
    monkeypatch: pytest.MonkeyPatch, pid_exited: Callable[[int], bool]
) -> None:
    started: list[int] = []

    def interrupted(self: ServerProcess) -> None:
        assert self.pid is not None
        started.append(self.pid)
        raise KeyboardInterrupt  # fault injection: Ctrl-C while waiting for moto

    monkeypatch.setattr(ServerProcess, "_wait_ready", interrupted)
    server = LocalS3()
    with pytest.raises(KeyboardInterrupt):
        server.start()
    assert len(started) == 1 and server.pid is None
    try:
        with pytest.raises(ProcessLookupError):
            os.kill(started[0], 0)
    finally:
        if not pid_exited(started[0]):
            os.kill(started[0], signal.SIGKILL)  # the server this test started, by PID


def test_silent_upstream_gets_a_504_not_a_hang() -> None:
    # An upstream that accepts connections and never answers (a hung store).
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    upstream = f"http://127.0.0.1:{silent.getsockname()[1]}"
    try:
        with LatencyProxy(upstream, upstream_timeout_s=0.2) as proxy:
            conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=30)
            status, body = _get(conn, "/bucket/key")
            conn.close()
    finally:
        silent.close()
    assert status == 504
    assert upstream.encode() in body and b"0.2 s" in body


def test_upstream_timeout_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="upstream_timeout_s must be > 0"):
        LatencyProxy("http://127.0.0.1:9", upstream_timeout_s=0)
