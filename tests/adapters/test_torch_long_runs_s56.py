"""Epoch loops of days over worker processes that outlive each epoch: a
``HeadraceDataLoader(num_workers=2, persistent_workers=True)`` and a stock
``DataLoader(num_workers=2, persistent_workers=True)``, over tar shards with broken
samples under ``on_corrupt="replace"`` (replaced in the workers, their news relayed to
the main process with the batches), a state saved at every step.

The main process is counted as tests/pipeline/test_long_runs.py counts it (descriptors by
target, threads by pool, tracked objects, headrace's tables, traced heap); each worker by
its descriptors (by target, numbers masked), threads (``/proc/PID/task``) and RSS.
Counted, never timed.
"""

from __future__ import annotations

import collections
import contextlib
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="torch is an optional extra (pip install torch)")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pipeline"))
from test_long_runs import _assert_flat, _mark, traced  # noqa: E402, F401 (a fixture)
from test_long_runs_s56 import _tar  # noqa: E402
from test_torch_lifecycle import descendants  # noqa: E402

from headrace.formats import FileSource  # noqa: E402
from headrace.torch import HeadraceDataLoader, TorchDataset  # noqa: E402

# Stock DataLoader workers fork: a test process that imported JAX earlier warns.
pytestmark = pytest.mark.filterwarnings("ignore:os.fork\\(\\) was called:RuntimeWarning")

EPOCHS = 130  # of 4 steps of 8 samples: marks at 28-30 and at 128-130


def _worker(pid: int, data: Path) -> dict[str, Any]:
    """A worker's descriptors by target (numbers masked: pipes and sockets are named
    anew), those on the dataset's files and torch's shared-memory files of batches in
    flight apart, threads and RSS in KB."""
    fds: collections.Counter[str] = collections.Counter()
    files = shm = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith(f"{data}/"):
                files += 1
            elif target.startswith("/dev/shm/torch_"):
                shm += 1  # batches sent and not yet taken: as many as the timing has
            else:
                fds[re.sub(r"\d+", "N", target)] += 1
    with open(f"/proc/{pid}/status") as fh:
        rss = next(int(line.split()[1]) for line in fh if line.startswith("VmRSS"))
    return {
        "fds": fds,
        "files": files,
        "shm": shm,
        "tasks": len(os.listdir(f"/proc/{pid}/task")),
        "rss": rss,
    }


def _masked(fds: collections.Counter[str]) -> collections.Counter[str]:
    """``fds`` with the numbers of torch's shared-memory files masked (a batch's tensors
    come in a new one each, which the consumer holds while it holds the batch)."""
    out: collections.Counter[str] = collections.Counter()
    for target, n in fds.items():
        out[re.sub(r"\d+", "N", target) if target.startswith("/dev/shm/torch_") else target] += n
    return out


def _workers(data: Path) -> dict[int, dict[str, Any]]:
    """Every process below this one: the workers, and the fork server and resource
    tracker (which must not change either)."""
    return {pid: _worker(pid, data) for pid in sorted(descendants())}


def _assert_workers_flat(a: dict[int, dict[str, Any]], b: dict[int, dict[str, Any]]) -> None:
    assert set(a) == set(b), "worker processes started or ended between the marks"
    for pid in a:
        assert b[pid]["fds"] == a[pid]["fds"], pid
        assert b[pid]["files"] <= 64
        assert b[pid]["shm"] <= 64
        # Up to 8 threads a pool may still start on demand (on a loaded machine);
        # one a few epochs would be 40.
        assert b[pid]["tasks"] <= a[pid]["tasks"] + 8, pid
        # 100 epochs, 400 steps: 0.4 MB grew in a healthy run (torch's and the
        # allocator's); a leak of 64 KB an epoch fails.
        assert b[pid]["rss"] - a[pid]["rss"] < 6400, pid


def _run(dl: Any, src: FileSource, data: Path, save: Any, again: Any = None) -> None:
    marks: dict[int, dict[str, Any]] = {}
    kids: dict[int, dict[int, dict[str, Any]]] = {}
    for epoch in range(1, EPOCHS + 1):
        if again is not None:
            again()
        for i, _ in zip(range(4), dl, strict=False):  # an epoch of 4 steps, then a break
            save(i)
        if epoch in (28, 29, 30, 128, 129, 130):
            marks[epoch] = _mark()
            marks[epoch]["fds"] = _masked(marks[epoch]["fds"])
            kids[epoch] = _workers(data)
    before, after = [marks[e] for e in (28, 29, 30)], [marks[e] for e in (128, 129, 130)]
    _assert_flat(before, after, 100, data, nbytes=2000)
    _assert_workers_flat(kids[30], kids[130])
    # The workers' broken samples reached the main process's source, each once.
    assert all(len(keys) <= 2 for keys in src.broken_samples.values())
    assert src.broken_samples


@pytest.mark.usefixtures("traced")
def test_a_persistent_headrace_dataloader_holds_what_its_first_epochs_held(tmp_path: Path) -> None:
    src = _tar(tmp_path)()
    assert isinstance(src, FileSource)
    # One run of all the epochs' steps, 4 an iter(), each going on from the last.
    ds = TorchDataset(src, batch_size=8, seed=0, steps=4 * EPOCHS)
    with HeadraceDataLoader(ds, num_workers=2, persistent_workers=True) as dl:
        _run(dl, src, tmp_path / "tar", lambda i: dl.state_dict())


@pytest.mark.usefixtures("traced")
def test_a_stock_persistent_dataloader_holds_what_its_first_epochs_held(tmp_path: Path) -> None:
    src = _tar(tmp_path)()
    assert isinstance(src, FileSource)
    ds = TorchDataset(src, batch_size=8, seed=0, steps=4)
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2, persistent_workers=True)
    try:
        # The same 4 steps each epoch, on purpose (as a stock DataLoader's workers give).
        again = lambda: ds.load_state_dict(ds.state_at(0))  # noqa: E731
        _run(dl, src, tmp_path / "tar", lambda i: ds.state_at(i), again)
    finally:
        del dl  # its workers: stopped when collected
