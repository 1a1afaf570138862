"""A resumed Lightning run validates on the same batches as an uninterrupted one, with a
stock ``DataLoader``'s workers too (session 54).

An exact pass (``epochs=1``) whose state was loaded at step 2 before the fit (a run
resumed part way through a validation) goes on from step 2 in its first validation;
every later one is the whole pass, as in the run that was never interrupted. Until
session 54, a stock ``DataLoader(ds, batch_size=None, num_workers=2)``'s workers began
every validation at the loaded step (each left out the pass's first 2 batches; its
workers copy the dataset, which the main process never iterates), where a
``HeadraceDataLoader`` or a stock DataLoader without workers began the second at step
0; and every loader's later validations stopped after 3 batches, the ``len()`` that
Lightning took once, before the first (from step 2).

One script, one Lightning import: two fits of 2 epochs (1 training batch each, a sanity
check of 1 batch), each followed by ``trainer.validate()``: one with no state loaded,
one with each val dataset's state loaded at step 2. Val loaders: a
``HeadraceDataLoader`` without workers, a stock DataLoader with 2 forked workers, and
one with 2 persistent forkserver workers. Each batch is digested and compared with a
plain ``Loader``'s pass.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import subprocess
from typing import Any

import numpy as np
import pytest
from _adapter_data import run_script

from headrace.formats import TokenSource
from headrace.pipeline import Loader

pytest.importorskip("torch", reason="torch is an optional extra (pip install torch)")
# Looked up, not imported: every xdist worker collects this module, and importing
# Lightning costs each 4-6 s of CPU for the one that runs it.
if importlib.util.find_spec("lightning") is None:
    pytest.skip("pip install lightning (in the test extra)", allow_module_level=True)

pytestmark = pytest.mark.integration

_SCRIPT = """\
import hashlib, json, warnings
from pathlib import Path
import torch
from torch.utils.data import DataLoader
from headrace import torch as ht
from headrace.formats import TokenSource

D = Path({root!r})

def dataset(name, at=0, **kw):
    ds = ht.TorchDataset(TokenSource(D / name, dtype="uint16", context=8), batch_size=4, **kw)
    if at:
        ds.load_state_dict(ds.state_at(at))
    return ds

def digest(batch):
    return hashlib.sha256(b"".join(batch[k].numpy().tobytes() for k in sorted(batch))).hexdigest()

def main():
    import lightning as L

    warnings.filterwarnings("ignore", ".*does not have many workers.*")

    class Model(L.LightningModule):
        def __init__(self, vals):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1))
            self.vals, self.record = vals, []

        def train_dataloader(self):
            return ht.HeadraceDataLoader(dataset("train.bin", seed=1, steps=4))

        def val_dataloader(self):
            return list(self.vals.values())

        def training_step(self, batch, index):
            return self.w * batch["x"].float().mean()

        def on_validation_epoch_start(self):
            self.seen = {{k: [] for k in self.vals}}

        def validation_step(self, batch, index, dataloader_idx=0):
            self.seen[list(self.vals)[dataloader_idx]].append(digest(batch))

        def on_validation_epoch_end(self):
            self.record.append(self.seen)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    for at in (0, 2):  # never interrupted; resumed at step 2 of the pass
        val = lambda: dataset("val.bin", at=at, seed=0, epochs=1)
        model = Model(dict(
            headrace=ht.HeadraceDataLoader(val()),
            stock2=DataLoader(val(), batch_size=None, num_workers=2),
            persistent=DataLoader(val(), batch_size=None, num_workers=2,
                                  persistent_workers=True, multiprocessing_context="forkserver"),
        ))
        trainer = L.Trainer(accelerator="cpu", devices=1, max_epochs=2, logger=False,
                            enable_progress_bar=False, enable_model_summary=False,
                            enable_checkpointing=False, default_root_dir=D,
                            num_sanity_val_steps=1, limit_train_batches=1)
        trainer.fit(model)
        trainer.validate(model, verbose=False)
        print(json.dumps(model.record))

if __name__ == "__main__":
    main()
"""

NAMES = ("headrace", "stock2", "persistent")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], list[Any], list[Any]]:
    """The pass's batches; the validations of the run never interrupted, and of the
    resumed one (each: the sanity check, 2 validations of the fit, ``validate()``)."""
    root = tmp_path_factory.mktemp("lightning_resume")
    rng = np.random.default_rng(0)
    rng.integers(0, 50_000, 4 * 4 * 8 + 1, dtype=np.uint16).tofile(root / "train.bin")
    rng.integers(0, 50_000, 5 * 4 * 8 + 1, dtype=np.uint16).tofile(root / "val.bin")
    script = root / "resume.py"
    script.write_text(_SCRIPT.format(root=str(root)))
    # 10-20 s alone; the bound is on a hang, on a loaded machine.
    done: subprocess.CompletedProcess[str] = run_script(script, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [json.loads(s) for s in done.stdout.splitlines() if s.startswith("[")]
    assert len(lines) == 2, done.stdout
    with Loader(
        TokenSource(root / "val.bin", dtype="uint16", context=8), batch_size=4, seed=0, epochs=1
    ) as ld:
        whole = [
            hashlib.sha256(b"".join(b[k].tobytes() for k in sorted(b))).hexdigest() for b in ld
        ]
    return whole, lines[0], lines[1]


@pytest.mark.parametrize("name", NAMES)
def test_resumed_validations_are_the_uninterrupted_ones(
    runs: tuple[list[str], list[Any], list[Any]], name: str
) -> None:
    whole, never, resumed = runs
    assert len(whole) == 5
    # Never interrupted: the sanity check's one batch, then the whole pass each time.
    assert [v[name] for v in never] == [whole[:1], whole, whole, whole], name
    # Resumed at step 2: the first validation goes on from there (the sanity check moved
    # it not); then, as never interrupted, the whole pass.
    got = [v[name] for v in resumed]
    assert got == [whole[2:3], whole[2:], whole, whole], name
