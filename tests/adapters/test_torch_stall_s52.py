"""A slow transform in DataLoader workers (session 52): the main process of
``HeadraceDataLoader(num_workers=2)``, where the training loop waits (and the only
process whose warnings reach a notebook), named the worker and "stalled storage?", never
the transform the worker was running; a stock ``DataLoader``'s workers warn on their own
stderr, naming a ``Mapped`` source's function too.

One script, run as a user runs it (warnings printed, not recorded by pytest): a loader
transform that sleeps past ``stall_warn_s`` under HeadraceDataLoader, then a Mapped fn
that does under a stock DataLoader.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from _adapter_data import run_script

pytest.importorskip("torch", reason="torch is an optional extra (pip install torch)")

_SCRIPT = """\
import sys, time
from pathlib import Path
import torch
from _adapter_data import token_source
from headrace import torch as ht
from headrace.pipeline import Mapped

def slow_augment(arrays, samples):
    time.sleep(0.8)  # a heavy Python augmentation
    return arrays

class Relabel:
    def slow(self, arrays, samples):
        time.sleep(0.8)
        return arrays

if __name__ == "__main__":
    ds = ht.TorchDataset(token_source(Path({root!r})), batch_size=8, steps=2, chunk_steps=1,
                         transform=slow_augment, stall_warn_s=0.2)
    with ht.HeadraceDataLoader(ds, num_workers=2) as dl:
        for _ in dl:
            pass
    print({split!r}, file=sys.stderr, flush=True)
    mapped = Mapped(token_source(Path({root!r})), Relabel().slow)
    ds = ht.TorchDataset(mapped, batch_size=8, steps=2, chunk_steps=1, stall_warn_s=0.2)
    for _ in torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2):
        pass
"""

_SPLIT = "-- the stock DataLoader's part --"


@pytest.fixture(scope="module")
def stderr(root: Path, tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """Each part's stderr: HeadraceDataLoader's, the stock DataLoader's."""
    script = tmp_path_factory.mktemp("stall") / "slow_transform.py"
    script.write_text(_SCRIPT.format(root=str(root), split=_SPLIT))
    done: subprocess.CompletedProcess[str] = run_script(script)
    assert done.returncode == 0, done.stderr
    parts = done.stderr.split(_SPLIT + "\n")
    assert len(parts) == 2, done.stderr
    return parts


def test_the_main_process_names_the_transform_its_worker_runs(stderr: list[str]) -> None:
    """It said "waiting for worker 0 of 2 (pid ...), which reads it; ... stalled
    storage?": the user was sent to look at the storage."""
    main = re.findall(r"headrace: no batch for [^\n]*waiting for worker [^\n]*", stderr[0])
    assert main, stderr[0]
    named = [w for w in main if "transform slow_augment has run for" in w]
    assert named, main
    assert "num_workers" in named[0] and "cheaper" in named[0], named[0]
    assert "stalled storage?" not in named[0]


def test_a_stock_dataloaders_workers_name_the_mapped_function(stderr: list[str]) -> None:
    said = re.findall(r"headrace: no batch for [^\n]*", stderr[1])
    assert said, stderr[1]
    assert any("Mapped fn Relabel.slow has run for" in w for w in said), said
