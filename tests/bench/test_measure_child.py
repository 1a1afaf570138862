"""The measurement process's exit: its exit handlers run, and then it ends without
finalizing the interpreter (where an obstore thread asking for the GIL aborted it)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import headrace
from headrace.bench._measure import CHILD, CONFIG_EXIT
from headrace.cli import main

_SRC = str(Path(headrace.__file__).resolve().parents[1])
# What the child does before the bench's own code: an exit handler that says it ran.
_HANDLER = "import atexit; atexit.register(lambda: print('exit handler ran'));"


def _run(stdin: str) -> subprocess.CompletedProcess[str]:
    code = _HANDLER + CHILD[1]
    env = dict(os.environ, PYTHONPATH=_SRC)
    return subprocess.run(
        [sys.executable, "-c", code], input=stdin, capture_output=True, text=True, env=env,
        timeout=60, check=False,
    )  # fmt: skip


def test_a_bug_in_the_child_prints_its_traceback_runs_exit_handlers_and_exits_1() -> None:
    proc = _run("not json")
    assert proc.returncode == 1
    assert "json.decoder.JSONDecodeError" in proc.stderr and "Traceback" in proc.stderr
    assert proc.stdout == "exit handler ran\n"


def test_a_refused_workload_keeps_its_exit_status_and_message() -> None:
    req = {"workload": {"name": "w", "kind": "no-such-kind"}, "root": "/nonexistent",
           "variant": "headrace", "steps": 1}  # fmt: skip
    proc = _run(json.dumps(req))
    assert proc.returncode == CONFIG_EXIT, proc.stderr
    assert proc.stderr == "<workload>: missing 'train'\n"
    assert proc.stdout == "exit handler ran\n"


def _measuring(parent: int) -> int | None:
    """The measurement process among ``parent``'s children, once it has started."""
    try:
        with open(f"/proc/{parent}/task/{parent}/children") as fh:
            kids = [int(p) for p in fh.read().split()]
    except OSError:
        return None
    for kid in kids:
        try:
            with open(f"/proc/{kid}/cmdline", "rb") as fh:
                if CHILD[1].encode() in fh.read():
                    return kid
        except OSError:
            continue
    return None


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_the_measurement_process_ends_with_a_stopped_or_killed_bench(
    tmp_path: Path, sig: signal.Signals, pid_exited: Callable[[int], bool]
) -> None:
    # The child got its request on stdin, which was then closed: nothing tied it to the
    # bench, so a bench stopped by a scheduler (SIGTERM) or the OOM killer (SIGKILL) left
    # it reading the dataset to the end of its trial, minutes on, for no one.
    root = str(tmp_path / "d")
    assert main(["gen", "tokens", "--token-file-gib", "0.002", "--root", root, "-q"]) == 0
    argv = ["bench", "-w", "tokens", "--token-file-gib", "0.002", "--root", root]
    argv += ["--steps", "10000000", "--trials", "1", "--variants", "headrace-sync", "-q"]
    env = dict(os.environ, PYTHONPATH=_SRC)
    proc = subprocess.Popen(
        [sys.executable, "-m", "headrace", *argv],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    child = None
    try:
        deadline = time.monotonic() + 60
        while (child := _measuring(proc.pid)) is None:
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, "no measurement process started"
            time.sleep(0.01)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == (143 if sig == signal.SIGTERM else -sig), err
        # A bound on hanging, not a speed check: it leaves within a second or never.
        deadline = time.monotonic() + 30
        while not pid_exited(child) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert pid_exited(child), f"the measurement process {child} outlived the bench"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        if child is not None and not pid_exited(child):
            os.kill(child, signal.SIGKILL)
