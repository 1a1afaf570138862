"""Server processes when things go wrong: a lifeline with no usable stdin, a port
taken between probing and binding, and bad ``headrace emulate`` arguments."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from headrace.cli import main
from headrace.emulate._lifeline import argv_for
from headrace.emulate._server import ServerProcess

_ENV = dict(os.environ, PYTHONPATH=str(Path(__file__).parents[2] / "src"))


def test_the_lifeline_without_a_module_says_how_to_call_it() -> None:
    argv = argv_for("unused")[:-1]  # the wrapper alone, no MODULE
    out = subprocess.run(argv, env=_ENV, capture_output=True, text=True, timeout=30)
    assert out.returncode == 1
    assert "usage: python -c 'import headrace.emulate._lifeline as m; m.main()' MODULE" in (
        out.stderr
    )


def test_a_lifeline_reset_instead_of_closed_still_stops_the_server() -> None:
    # stdin is a TCP socket whose other end is reset (RST), so the watcher's read
    # fails with ECONNRESET rather than seeing EOF: the server must stop all the same.
    with socket.create_server(("127.0.0.1", 0)) as listener:
        ours = socket.create_connection(listener.getsockname())
        theirs, _ = listener.accept()
    with theirs:
        proc = subprocess.Popen(
            argv_for("http.server", "--bind", "127.0.0.1", "0"),
            stdin=theirs.fileno(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=_ENV,
        )
    try:
        ours.send(b"x")  # something to read first: the server is up and watching
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
        ours.close()  # SO_LINGER 0: close sends RST
        _, err = proc.communicate(timeout=15)  # a bound on hanging, not a speed check
        assert proc.returncode == -15, err  # SIGTERM, sent by the lifeline itself
    finally:
        if proc.poll() is None:
            proc.kill()  # the process this test started, by PID
            proc.wait()


def test_a_port_taken_before_the_server_binds_it_is_tried_once_more(
    pid_exited: Callable[[int], bool],
) -> None:
    thief = socket.socket()
    ports: list[int] = []

    def argv(port: int) -> list[str]:
        if not ports:
            thief.bind(("127.0.0.1", port))  # another process gets there first
            thief.listen(1)
        ports.append(port)
        return argv_for("http.server", "--bind", "127.0.0.1", str(port))

    server = ServerProcess("http.server", argv, env=_ENV, start_timeout_s=15)
    try:
        server.start()
        assert len(ports) == 2 and server.port == ports[1] != ports[0]
        with urllib.request.urlopen(server.endpoint + "/", timeout=10) as resp:
            assert resp.status == 200
        pid = server.pid
        assert pid is not None
    finally:
        server.stop()
        thief.close()
    assert pid_exited(pid)


def test_a_missing_slowfs_source_is_a_message_and_status_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The s3 emulator's argument errors are in tests/test_cli.py.
    assert main(["emulate", "slowfs", "/no/such/src", "/tmp"]) == 2
    err = capsys.readouterr().err
    # named as the s3 emulator's are (it began "error: ")
    assert "headrace emulate: slowfs: source '/no/such/src' is not a directory; give an" in err


def test_an_unknown_emulator_is_an_argparse_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["emulate", "nfs"])
    assert info.value.code == 2
    assert "invalid choice: 'nfs'" in capsys.readouterr().err


def test_a_server_that_ignores_sigterm_is_killed_with_its_group(
    pid_exited: Callable[[int], bool],
) -> None:
    code = (
        "import signal, sys, http.server\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "http.server.test(HandlerClass=http.server.SimpleHTTPRequestHandler,"
        " port=int(sys.argv[1]), bind='127.0.0.1')\n"
    )
    server = ServerProcess(
        "stubborn",
        lambda port: [sys.executable, "-c", code, str(port)],
        ready_path="/no-such-file",  # a 404 still means it answers
        stop_timeout_s=0.3,
    )
    server.start()
    pid = server.pid
    assert pid is not None
    server.stop()
    assert pid_exited(pid)
    server.stop()  # twice is harmless


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--read-latency-ms", "-1"], "--read-latency-ms must be a finite number >= 0 (got -1.0)"),
        (["--max-threads", "0"], "--max-threads must be an integer in [1, 1024] (got 0)"),
    ],
)
def test_slowfs_options_out_of_range_are_named_by_their_flags(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], expected: str
) -> None:
    # They read "error: SlowFSConfig.read_latency_ms must be ...": the Python field.
    (tmp_path / "src").mkdir()
    (tmp_path / "mnt").mkdir()
    assert main(["emulate", "slowfs", str(tmp_path / "src"), str(tmp_path / "mnt"), *args]) == 2
    assert f"headrace emulate: {expected}" in capsys.readouterr().err
