"""The measurement process's exit: its exit handlers run, and then it ends without
finalizing the interpreter (where an obstore thread asking for the GIL aborted it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import headrace
from headrace.bench._measure import CHILD, CONFIG_EXIT

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
