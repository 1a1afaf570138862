"""The moto launcher and ``headrace emulate s3`` when the server fails: too slow to
start, killed under a proxy, or an ``--endpoint`` that nobody serves."""

from __future__ import annotations

import http.client
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from headrace.emulate import LatencyProxy, LocalS3
from headrace.errors import StorageError

pytestmark = pytest.mark.integration

_ENV = dict(os.environ, PYTHONPATH=str(Path(__file__).parents[2] / "src"))


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _refused(endpoint: str) -> bool:
    try:
        socket.create_connection(("127.0.0.1", int(endpoint.rsplit(":", 1)[1])), timeout=5).close()
    except ConnectionRefusedError:
        return True
    except ConnectionResetError:  # accepted, then reset: the server is still dying
        return False
    return False


def _get(port: int, path: str) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read().decode()
    finally:
        conn.close()


def test_moto_that_does_not_answer_in_time_is_named_and_stopped() -> None:
    server = LocalS3(start_timeout_s=0.05)  # far less than moto needs to import
    with pytest.raises(
        StorageError, match=r"moto server did not answer on http://127\.0\.0\.1:\d+ within 0\.05 s"
    ):
        server.start()
    assert server.pid is None  # both tries stopped by PID


def test_moto_killed_under_the_proxy_is_a_502_and_closes_cleanly(
    pid_exited: Callable[[int], bool],
) -> None:
    with LocalS3() as s3, LatencyProxy(s3.endpoint) as proxy:
        assert _get(proxy.port, "/")[0] == 200
        pid = s3.pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)  # the server this test started, by PID
        # Until its last thread has exited (the leader may show as a zombie
        # earlier), the kernel may still accept on its socket and then reset.
        deadline = time.monotonic() + 10  # a bound on hanging, not a speed check
        while not _refused(s3.endpoint) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert pid_exited(pid)
        status, body = _get(proxy.port, "/bucket/key")
        assert (status, body) == (
            502,
            f"upstream {s3.endpoint} could not be reached: Connection refused",
        )
    assert s3.pid is None  # close() of a dead server is not an error


def test_emulate_s3_in_front_of_a_dead_endpoint_says_so_per_request() -> None:
    upstream = f"http://127.0.0.1:{_closed_port()}"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "headrace.cli",
            "emulate",
            "s3",
            "--endpoint",
            upstream,
            "--latency-ms",
            "1",
        ],
        env=_ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        endpoint = ""
        for line in proc.stdout:
            if line.startswith("endpoint:"):
                endpoint = line.split()[1]
            if "Ctrl-C" in line:
                break
        status, body = _get(int(endpoint.rsplit(":", 1)[1]), "/bucket/key")
        assert (status, body) == (
            502,
            f"upstream {upstream} could not be reached: Connection refused",
        )
        proc.send_signal(signal.SIGINT)  # Ctrl-C, to the process this test started
        out, err = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "proxy: 1 requests, 0 bytes down" in out
    assert "Traceback" not in err
