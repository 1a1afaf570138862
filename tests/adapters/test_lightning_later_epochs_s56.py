"""A Lightning fit of an exact pass (``epochs=1``) over ``max_epochs=3``, resumed from a
checkpoint part way through its first epoch, over a stock ``DataLoader`` (session 56).

The state loaded in ``on_load_checkpoint`` starts the resumed epoch at its step; each
later epoch is a whole pass from step 0, as in the run never interrupted. Until session
56, with workers, every later epoch started at the loaded step too (6 of 12 batches,
resumed at step 6): each epoch's workers are fresh copies of the main process's dataset,
which still held the loaded state. Checked with 2 workers (new ones each epoch, and
persistent ones) and without workers; the states the resumed fit saves in its later
epochs are the uninterrupted fit's too.
"""

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
WORKERS, PERSISTENT = {workers!r}, {persistent!r}

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
            self.record = {{"sized": {{}}, "epochs": {{}}, "saved": {{}}}}

        def train_dataloader(self):
            return DataLoader(self.ds, batch_size=None, num_workers=WORKERS,
                              persistent_workers=PERSISTENT)

        def training_step(self, batch, index):
            epoch = str(self.current_epoch)
            self.record["sized"].setdefault(epoch, self.trainer.num_training_batches)
            self.record["epochs"].setdefault(epoch, []).append(digest(batch))
            return self.w * batch["x"].float().mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def on_save_checkpoint(self, checkpoint):
            checkpoint["data"] = self.ds.state_dict()
            self.record["saved"][self.global_step] = checkpoint["data"]["step"]

        def on_load_checkpoint(self, checkpoint):
            self.ds.load_state_dict(checkpoint["data"])

    def fit(where, ckpt=None):
        model = Model()
        every = ModelCheckpoint(dirpath=D / where, every_n_train_steps=6, save_top_k=-1,
                                filename="{{step}}")
        L.Trainer(accelerator="cpu", devices=1, max_epochs=3, logger=False,
                  enable_progress_bar=False, enable_model_summary=False, default_root_dir=D,
                  num_sanity_val_steps=0, callbacks=[every]).fit(model, ckpt_path=ckpt)
        print(json.dumps(model.record), flush=True)

    fit("whole")
    fit("resumed", D / "whole" / "step=6.ckpt")

if __name__ == "__main__":
    main()
"""


@pytest.mark.parametrize(
    ("workers", "persistent"), [(2, False), (2, True), (0, False)], ids=["2", "2-persistent", "0"]
)
def test_a_fit_resumed_mid_epoch_trains_each_later_epoch_from_its_first_step(
    tmp_path: Any, workers: int, persistent: bool
) -> None:
    rng = np.random.default_rng(0)
    rng.integers(0, 50_000, 12 * 4 * 8 + 1, dtype=np.uint16).tofile(tmp_path / "train.bin")
    script = tmp_path / "later_epochs.py"
    script.write_text(_SCRIPT.format(root=str(tmp_path), workers=workers, persistent=persistent))
    # Two fits of 36 steps: the bound is on a hang.
    done: subprocess.CompletedProcess[str] = run_script(script, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    whole, resumed = [json.loads(s) for s in done.stdout.splitlines() if s.startswith("{")]
    assert [len(whole["epochs"][e]) for e in "012"] == [12, 12, 12], whole
    assert whole["sized"] == {"0": 12, "1": 12, "2": 12}, whole
    assert resumed["epochs"] == {
        "0": whole["epochs"]["0"][6:],
        "1": whole["epochs"]["1"],  # was the pass's last 6 batches, from step 6
        "2": whole["epochs"]["2"],
    }, resumed
    assert resumed["sized"] == whole["sized"], resumed
    # The states saved in the later epochs resume where the uninterrupted fit's do.
    assert whole["saved"] == {"6": 6, "12": 12, "18": 6, "24": 12, "30": 6, "36": 12}, whole
    assert resumed["saved"] == {k: v for k, v in whole["saved"].items() if k != "6"}, resumed


@pytest.mark.parametrize("persistent", [False, True], ids=["new", "persistent"])
def test_a_loaded_state_starts_one_iteration_of_a_stock_dataloaders_workers(
    tmp_path: Any, persistent: bool
) -> None:
    """Without Lightning: loaded once, the next epochs of an exact pass start at step 0, as
    with ``num_workers=0`` (they started at the loaded step, each)."""
    from torch.utils.data import DataLoader

    from headrace.formats import TokenSource
    from headrace.torch import TorchDataset

    rng = np.random.default_rng(1)
    rng.integers(0, 50_000, 12 * 4 * 8 + 1, dtype=np.uint16).tofile(tmp_path / "t.bin")

    def epochs(workers: int) -> list[list[bytes]]:
        ds = TorchDataset(
            TokenSource(tmp_path / "t.bin", dtype="uint16", context=8), batch_size=4, epochs=1
        )
        ds.load_state_dict(ds.state_at(6))
        dl = DataLoader(
            ds, batch_size=None, num_workers=workers, persistent_workers=persistent and workers > 0
        )
        return [[b["x"].numpy().tobytes() for b in dl] for _ in range(3)]

    alone = epochs(0)
    assert [len(e) for e in alone] == [6, 12, 12]
    assert epochs(2) == alone  # was [6, 6, 6] batches, each epoch from step 6
