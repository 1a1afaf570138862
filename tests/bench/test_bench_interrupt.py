"""`headrace bench` stopped by Ctrl-C (SIGINT) or SIGTERM in the middle of its trials: a
real subprocess on a tiny token workload, its progress bar on a pseudo-terminal (so it
draws, as for a user), the signal sent once a trial has finished; the report holds the
trials that finished, marked interrupted, and validates."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import jsonschema
import pytest
from _bench_run import schema

TRIALS = 10
# ANSI control sequences rich draws with (their digits are no figures).
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _wait_for_a_trial(master: int, proc: subprocess.Popen[str], deadline: float) -> str:
    """What the progress bar drew, read until it shows a trial done (``trials ... N/M``
    with N >= 1); fails if the run ends or the deadline passes first."""
    seen = ""
    while time.monotonic() < deadline and proc.poll() is None:
        ready, _, _ = select.select([master], [], [], 0.2)
        if not ready:
            continue
        try:
            seen += os.read(master, 65536).decode(errors="replace")
        except OSError:  # the terminal closed: the run is over
            break
        plain = _ANSI.sub("", seen)
        if any(int(n) >= 1 for n in re.findall(r"tokens: trials\D*?(\d+)/\d+", plain)):
            return plain
    pytest.fail(f"no trial finished before the run ended or 60 s passed: {_ANSI.sub('', seen)!r}")


@pytest.mark.parametrize(
    ("sig", "rc", "how"), [(signal.SIGINT, 130, "Ctrl-C"), (signal.SIGTERM, 143, "SIGTERM")]
)
def test_an_interrupted_bench_reports_the_trials_that_finished(
    tmp_path: Path, sig: signal.Signals, rc: int, how: str
) -> None:
    # Ctrl-C in the middle of a workload's trials kept nothing: the workload's figures
    # came when all its trials were done, and the run exited 130 with no --json file
    # (fails before: r.json missing).
    out = tmp_path / "r.json"
    src = Path(__file__).resolve().parents[2] / "src"
    env = {**os.environ, "PYTHONPATH": str(src), "COLUMNS": "160", "TERM": "xterm"}
    cmd = [
        sys.executable, "-m", "headrace", "bench", "-w", "tokens",
        "--variants", "naive,memcpy", "--root", str(tmp_path / "d"),
        "--token-file-gib", "0.004", "--warmup", "3", "--no-isolate", "--json", str(out),
        # Trials of ~0.1 s each: the signal lands between the first and the last.
        "--steps", "150", "--trials", str(TRIALS),
    ]  # fmt: skip
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave, text=True, env=env
    )
    os.close(slave)
    drained: list[bytes] = []
    try:
        _wait_for_a_trial(master, proc, time.monotonic() + 60)
        proc.send_signal(sig)

        def drain() -> None:  # the bar goes on drawing while the run unwinds
            while True:
                try:
                    chunk = os.read(master, 65536)
                except OSError:
                    return
                if not chunk:
                    return
                drained.append(chunk)

        reader = threading.Thread(target=drain, daemon=True)
        reader.start()
        stdout, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    err = _ANSI.sub("", b"".join(drained).decode(errors="replace"))
    assert proc.returncode == rc, err
    report = json.loads(out.read_text())
    jsonschema.validate(report, schema())
    assert report["interrupted"] is True
    (w,) = report["workloads"]
    assert w["name"] == "tokens" and w["interrupted"] is True
    results = {r["variant"]: r for r in report["results"]}
    assert "naive" in results and set(results) <= {"naive", "memcpy"}
    for r in results.values():
        assert 1 <= r["trials"] < TRIALS and r["batches_per_s"] > 0
        assert r["batches_per_s_spread"]["min"] <= r["batches_per_s"]
    assert results["naive"]["digest"]  # its measurement pass, whole
    note = next(n for n in w["notes"] if n.startswith("tokens: interrupted"))
    assert note.startswith(f"tokens: interrupted ({how}) during its trials: the figures are")
    assert f"naive {results['naive']['trials']} of {TRIALS}" in note
    if "memcpy" not in results:
        assert "not measured: memcpy" in note
    assert w["storage_ceiling"]["gb_per_s"] is None  # not measured after the stop
    # The table of what finished, on stdout, then the stop said on stderr.
    assert "naive" in stdout and "batches/s" in stdout
    assert ("interrupted" if sig == signal.SIGINT else "terminated (SIGTERM)") in err
