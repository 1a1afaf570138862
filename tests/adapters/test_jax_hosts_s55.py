"""A user training on several hosts, emulated as ``jax.distributed`` processes on CPU of
2 devices each (session 55): token and padded-row batches gathered from 2 processes,
resumed on 3, equal one process's; and a host that stops before its loader (its data
path missing) named by the others at once, with its error, not waited for in silence."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("jax", reason="jax is an optional extra (pip install jax jaxlib)")

from _adapter_data import L, token_source
from test_jax import HERE, free_port

from headrace.formats import PaddedRows
from headrace.pipeline import Loader
from headrace.testing import batch_digest

UNAVAILABLE = "JAX-DISTRIBUTED-UNAVAILABLE"


def run_hosts(
    root: Path, out: Path, n: int, *args: str, env: dict[str, str] | None = None
) -> tuple[list[int | None], list[str]]:
    """``jax_hosts_s55.py`` as processes 0..n-1 of n: their exit codes and logs (the
    test skips where jax.distributed cannot start here)."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path]), **(env or {})}
    script = [sys.executable, str(HERE / "jax_hosts_s55.py"), str(root), str(out), str(port)]
    procs = [
        subprocess.Popen(
            [*script, str(n), str(pid), *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for pid in range(n)
    ]
    try:
        logs = [p.communicate(timeout=150)[0] for p in procs]  # a bound on hanging
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for log in logs:
        if UNAVAILABLE in log:
            pytest.skip(log[log.index(UNAVAILABLE) :].splitlines()[0])
    return [p.returncode for p in procs], logs


@pytest.mark.integration
def test_two_hosts_token_and_padded_rows_resume_on_three(root: Path, tmp_path: Path) -> None:
    sources: dict[str, Any] = {
        "tokens": token_source(root),
        "rows": PaddedRows(root / "rows0.npy", root / "mask0.npy", context=L, truncate=True),
    }
    want = {}
    for name, source in sources.items():
        with Loader(source, batch_size=12, seed=11, steps=6) as ld:
            want[name] = [batch_digest([b]) for b in ld]
    state = tmp_path / "state.json"
    codes, logs = run_hosts(root, tmp_path / "save", 2, "save", str(state))
    assert codes == [0, 0], logs
    codes, logs = run_hosts(root, tmp_path / "resume", 3, "resume", str(state))
    assert codes == [0, 0, 0], logs
    for pid in range(2):
        got = json.loads((tmp_path / f"save.{pid}").read_text())
        assert got == {name: w[:3] for name, w in want.items()}, pid
    for pid in range(3):
        got = json.loads((tmp_path / f"resume.{pid}").read_text())
        assert got == {name: w[3:] for name, w in want.items()}, pid


@pytest.mark.integration
def test_a_host_that_exits_before_its_loader_is_named_with_its_error(
    root: Path, tmp_path: Path
) -> None:
    # Process 1's data path is missing: it raises and exits before making its loader.
    # Process 0 waited the whole HEADRACE_JAX_WAIT_S (10 minutes by default), warning
    # "waited 30.0 s for process 1 to start iterating", then refused without saying that
    # process 1 had exited, or why; a wait of 60 s here leaves that refusal to be seen.
    codes, logs = run_hosts(root, tmp_path / "exits", 2, "exits", env={"HEADRACE_JAX_WAIT_S": "60"})
    assert codes[0] == 0, logs
    assert codes[1] != 0 and "missing" in logs[1], logs
    said = json.loads((tmp_path / "exits.0").read_text())
    assert "process 1 of 2 exited" in said, said
    assert "ObjectNotFoundError" in said and "missing/a.bin: no such file" in said, said
