"""ServerProcess: the start-up error paths name the server and say what it wrote."""

from __future__ import annotations

import sys

import pytest

from headrace.emulate._server import ServerProcess
from headrace.errors import StorageError


def test_a_server_that_exits_before_answering_is_named_with_its_output() -> None:
    server = ServerProcess(
        "crashy", lambda port: [sys.executable, "-c", "import sys; print('no config'); sys.exit(3)"]
    )
    with pytest.raises(
        StorageError,
        match=r"crashy exited with status 3 before answering on "
        r"http://127\.0\.0\.1:\d+: no config",
    ):
        server.start()
    assert server.pid is None  # stopped, its output file closed


def test_a_server_that_never_answers_is_stopped_after_the_timeout() -> None:
    server = ServerProcess(
        "mute",
        lambda port: [sys.executable, "-c", "import time; time.sleep(60)"],
        start_timeout_s=0.3,
        stop_timeout_s=1.0,
    )
    with pytest.raises(
        StorageError,
        match=r"mute did not answer on http://127\.0\.0\.1:\d+ "
        r"within 0\.3 s",
    ):
        server.start()
    assert server.pid is None
