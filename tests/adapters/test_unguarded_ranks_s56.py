"""A script without ``if __name__ == "__main__":`` on 2 gloo ranks (issue #7).

HeadraceDataLoader's workers start with forkserver and import the main module, so its
unguarded top-level code runs again in each: ``init_process_group`` too. Rank 0 got
the "guard the script" error from its crashed workers (their TCPStore's port was taken),
but rank 1's workers joined the group a second time and waited for good, and its only
warning asked "stalled storage?". Real ranks here (``RANK``/``WORLD_SIZE``/``MASTER_*``,
as torchrun sets them), each in a session of its own that is killed at the end.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="torch is an optional extra (pip install torch)")

HERE = Path(__file__).parent
GUARD = 'with `if __name__ == "__main__":`'

HEAD = (
    "from pathlib import Path\n"
    "import torch.distributed as dist\n"
    "from _adapter_data import BATCH, token_source\n"
    "from headrace import torch as ht\n"
)


def loop(root: Path, indent: str = "", **kw: object) -> str:
    opts = "".join(f", {k}={v!r}" for k, v in kw.items())
    return (
        f"{indent}ds = ht.TorchDataset(token_source(Path({str(root)!r})), batch_size=BATCH, "
        f"steps=4{opts})\n"
        f"{indent}for _ in ht.HeadraceDataLoader(ds, num_workers=2):\n"
        f"{indent}    pass\n"
    )


def ranks(script: Path, within: float, until: str | None = None) -> list[tuple[int | None, str]]:
    """Run ``script`` as ranks 0 and 1 of a gloo group; each rank's exit code (``None``:
    still running after ``within`` s, or once ``until`` is in its output) and output.
    Every process they started is killed at the end."""
    with socket.socket() as so:
        so.bind(("127.0.0.1", 0))
        port = so.getsockname()[1]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path]),
        "OMP_NUM_THREADS": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "WORLD_SIZE": "2",
    }
    logs = [script.with_suffix(f".rank{r}.log") for r in range(2)]
    procs = []
    try:
        for r, log in enumerate(logs):
            with open(log, "w") as fh:
                procs.append(
                    subprocess.Popen(
                        [sys.executable, str(script)],
                        env={**env, "RANK": str(r)},
                        stdout=fh,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,  # its workers and fork server die with it
                    )
                )
        deadline = time.monotonic() + within
        while time.monotonic() < deadline and any(p.poll() is None for p in procs):
            if until is not None and any(until in log.read_text() for log in logs):
                break
            time.sleep(0.2)
        return [(p.poll(), log.read_text()) for p, log in zip(procs, logs, strict=True)]
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()


def test_an_unguarded_script_fails_on_every_rank_before_any_worker_starts(
    root: Path, tmp_path: Path
) -> None:
    script = tmp_path / "train.py"
    script.write_text(HEAD + 'dist.init_process_group("gloo")\n' + loop(root))
    for r, (code, out) in enumerate(ranks(script, within=90)):
        assert code == 1, out[-3000:]
        last = out.strip().splitlines()[-1]  # torch prefixes its lines with "[rank0]: "
        assert last.startswith(f"[rank{r}]: headrace.errors.ConfigError: "), out[-3000:]
        assert f"{script} line 5 (`dist.init_process_group" in last  # the first to hang
        assert GUARD in last
        assert "forkserver.py" not in out  # no worker ran the script: none started


def test_an_unguarded_init_process_group_fails_on_every_rank(root: Path, tmp_path: Path) -> None:
    # The loop is guarded, the group's start is not: it runs again in each worker.
    script = tmp_path / "train.py"
    script.write_text(
        HEAD + 'dist.init_process_group("gloo")\nif __name__ == "__main__":\n' + loop(root, "    ")
    )
    for r, (code, out) in enumerate(ranks(script, within=90)):
        assert code == 1, out[-3000:]
        last = out.strip().splitlines()[-1]  # torch prefixes its lines with "[rank0]: "
        assert last.startswith(f"[rank{r}]: headrace.errors.ConfigError: "), out[-3000:]
        assert f"{script} line 5 (`dist.init_process_group" in last
        assert GUARD in last
        assert "forkserver.py" not in out  # no worker ran the script: none started


def test_a_single_process_script_without_the_guard_is_told_where(
    root: Path, tmp_path: Path
) -> None:
    # No torch.distributed: the workers would start workers of their own and crash (the
    # message came from their exit, after they had imported torch); now none starts.
    script = tmp_path / "train.py"
    script.write_text(HEAD + loop(root))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])}
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(
        f"headrace.errors.ConfigError: {script} line 6 (`for _ in ht.HeadraceDataLoader(ds, "
        "num_workers=2):`) starts headrace's worker processes from the script's top-level code"
    )
    assert GUARD in last
    assert "forkserver.py" not in done.stderr
