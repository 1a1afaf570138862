"""A Lightning fit over a stock DataLoader's workers, resumed from a checkpoint at an
epoch's end (session 55's review): the resumed epoch is one pass long.

With an exact pass (``epochs=1``), a checkpoint at step 12 of 12 resumed into an epoch
Lightning sized 24 batches (its 12 done and a new pass's 12): ``num_training_batches``,
and with it the progress bar and an LR schedule sized by ``estimated_stepping_batches``,
twice the pass."""

from __future__ import annotations

import importlib.util
import json
import subprocess
from typing import Any

import numpy as np
import pytest
from _adapter_data import run_script

pytest.importorskip("torch", reason="torch is an optional extra (pip install torch)")
# Looked up, not imported: every xdist worker collects this module.
if importlib.util.find_spec("lightning") is None:
    pytest.skip("pip install lightning (in the test extra)", allow_module_level=True)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:os.fork\\(\\) was called:RuntimeWarning"),
]

_SCRIPT = """\
import hashlib, json, warnings
from pathlib import Path
import torch
from torch.utils.data import DataLoader
from headrace import torch as ht
from headrace.formats import TokenSource

D = Path({root!r})

def digest(batch):
    return hashlib.sha256(b"".join(batch[k].numpy().tobytes() for k in sorted(batch))).hexdigest()

def main():
    import lightning as L
    from lightning.pytorch.callbacks import ModelCheckpoint

    warnings.filterwarnings("ignore", ".*(IterableDataset|many workers).*")

    class Model(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1))
            self.ds = ht.TorchDataset(TokenSource(D / "train.bin", dtype="uint16", context=8),
                                      batch_size=4, seed=1, epochs=1)
            self.record = {{"sized": {{}}, "epochs": {{}}}}

        def train_dataloader(self):
            return DataLoader(self.ds, batch_size=None, num_workers=2)

        def training_step(self, batch, index):
            epoch = str(self.current_epoch)  # (a resumed epoch begins without its start hook)
            self.record["sized"].setdefault(epoch, self.trainer.num_training_batches)
            self.record["epochs"].setdefault(epoch, []).append(digest(batch))
            return self.w * batch["x"].float().mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def on_save_checkpoint(self, checkpoint):
            checkpoint["data"] = self.ds.state_dict()

        def on_load_checkpoint(self, checkpoint):
            self.ds.load_state_dict(checkpoint["data"])

    def fit(ckpt=None):
        every = ckpt is None
        callbacks = [ModelCheckpoint(dirpath=D / "ck", every_n_train_steps=12, save_top_k=-1,
                                     filename="{{step}}")] if every else []
        model = Model()
        L.Trainer(accelerator="cpu", devices=1, max_epochs=2, logger=False,
                  enable_progress_bar=False, enable_model_summary=False, default_root_dir=D,
                  num_sanity_val_steps=0, enable_checkpointing=every, callbacks=callbacks,
                  ).fit(model, ckpt_path=ckpt)
        print(json.dumps(model.record), flush=True)

    fit()
    fit(D / "ck" / "step=12.ckpt")

if __name__ == "__main__":
    main()
"""


def test_a_fit_resumed_at_an_epochs_end_sizes_the_next_epoch_one_pass(tmp_path: Any) -> None:
    rng = np.random.default_rng(0)
    rng.integers(0, 50_000, 12 * 4 * 8 + 1, dtype=np.uint16).tofile(tmp_path / "train.bin")
    script = tmp_path / "epoch_end.py"
    script.write_text(_SCRIPT.format(root=str(tmp_path)))
    done: subprocess.CompletedProcess[str] = run_script(script, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    whole, resumed = [json.loads(s) for s in done.stdout.splitlines() if s.startswith("{")]
    assert whole["sized"] == {"0": 12, "1": 12}, whole
    assert resumed["sized"] == {"1": 12}, resumed  # was 24
    assert resumed["epochs"] == {"1": whole["epochs"]["1"]}, resumed
