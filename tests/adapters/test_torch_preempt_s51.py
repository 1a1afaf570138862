"""A preempted PyTorch job: the state it checkpoints must resume where its loop stood."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from itertools import islice
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="torch is an optional extra (pip install torch)")

from _adapter_data import BATCH, token_source  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from headrace import torch as ht  # noqa: E402
from headrace.errors import StateError  # noqa: E402
from headrace.testing import batch_digest  # noqa: E402

HERE = Path(__file__).parent

pytestmark = [
    pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning"),
    pytest.mark.filterwarnings("ignore:os.fork\\(\\) was called:RuntimeWarning"),
]


def dataset(root: Path, **kw: Any) -> ht.TorchDataset:
    return ht.TorchDataset(token_source(root), batch_size=BATCH, seed=5, steps=12, **kw)


def digests(batches: Any, n: int | None = None) -> list[str]:
    return [batch_digest([{k: v.numpy() for k, v in b.items()}]) for b in islice(batches, n)]


@pytest.mark.parametrize("persistent", [False, True])
def test_the_main_datasets_state_under_a_stock_dataloaders_workers_is_refused(
    root: Path, persistent: bool
) -> None:
    # A job checkpointing ds.state_dict() (what a DataLoader without workers resumes
    # from) with num_workers=2 saved step 0 at every checkpoint: the workers read, and
    # the main process's dataset only knows where their iteration began. Resumed after
    # a preemption, the run trained on its first batches again, without a word.
    ds = dataset(root)
    dl = DataLoader(ds, batch_size=None, num_workers=1, persistent_workers=persistent)
    it = iter(dl)
    got = digests(it, 3)
    with pytest.raises(StateError, match=r"began at step 0.*state_at\(step\).*HeadraceDataLoader"):
        ds.state_dict()
    assert len(dl) == 12  # (len() is what the next iteration would yield: unchanged)
    del it
    # The state the docs say to save there resumes at the consumer's step.
    ds.load_state_dict(ds.state_at(3))
    assert ds.state_dict()["step"] == 3  # a position set in this process: known again
    assert got + digests(DataLoader(ds, batch_size=None, num_workers=1)) == digests(dataset(root))


def test_a_stock_dataloaders_forkserver_workers_leave_when_the_job_is_sigkilled(
    root: Path, pid_exited: Callable[[int], bool]
) -> None:
    # torch's workers watch their parent's pid, and a forkserver worker's parent is the
    # fork server, which lives as long as they do (each holds its lifeline): after a
    # SIGKILL (an OOM kill, a preemption) the workers, the fork server and the resource
    # tracker stayed for good, with the dataset's memory and files and the queues'
    # semaphores in /dev/shm. (spawn workers' parent is the job: torch's watch ends them.)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])}
    pids: list[int] = []
    with subprocess.Popen(
        [sys.executable, str(HERE / "stock_orphan_s51.py"), str(root)],
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    ) as job:
        try:
            assert job.stdout is not None
            line = job.stdout.readline()
            assert line, f"the job exited with code {job.wait()} before reporting"
            pids = json.loads(line)
            job.kill()
            job.wait()
            # A bound on hanging, not a speed check: they left within about a second.
            deadline = time.monotonic() + 60
            while not all(map(pid_exited, pids)) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert [p for p in pids if not pid_exited(p)] == []
        finally:
            job.kill()
            for pid in pids:
                if not pid_exited(pid):
                    os.kill(pid, signal.SIGKILL)
