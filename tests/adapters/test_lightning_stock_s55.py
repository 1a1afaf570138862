"""``ds.state_dict()`` of a stock ``DataLoader(ds, num_workers=2)`` under a real Lightning
``Trainer`` (session 55).

Lightning saves no state for a stock DataLoader, so a user keeps the dataset's in their
``on_save_checkpoint`` and loads it in ``on_load_checkpoint``. Until session 55 that
``ds.state_dict()`` raised ``StateError`` whenever workers had handed over a batch: for
the val dataset after the sanity check (each validation starts where the dataset stands,
so the answer was known), and for the training dataset at every checkpoint (its workers
read ahead, and the main process could not tell the step the training step reached).
Now the val dataset names where the next validation starts, and the training dataset
the step after the last batch Lightning gave the training step (the fit loop's count of
the DataLoader iterator's batches, less those its fetcher holds ahead), so a run resumed
from any checkpoint trains on the uninterrupted run's batches, byte for byte.

One script, one Lightning import: an uninterrupted fit (12 training steps, a sanity
check of 2, a validation every 4 steps, a checkpoint every 3), the fit resumed from its
checkpoints of steps 3 and 6 (the second after a validation), and a stream without
``len()`` (``steps=None``: Lightning's fetcher takes one batch ahead) fit 7 steps and
resumed from step 3.
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
# Looked up, not imported: every xdist worker collects this module, and importing
# Lightning costs each 4-6 s of CPU for the one that runs it.
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

def dataset(name, **kw):
    return ht.TorchDataset(TokenSource(D / name, dtype="uint16", context=8), batch_size=4, **kw)

def digest(batch):
    return hashlib.sha256(b"".join(batch[k].numpy().tobytes() for k in sorted(batch))).hexdigest()

def main():
    import lightning as L
    from lightning.pytorch.callbacks import ModelCheckpoint

    warnings.filterwarnings("ignore", ".*IterableDataset. has .__len__.*")
    warnings.filterwarnings("ignore", ".*does not have many workers.*")

    class Model(L.LightningModule):
        def __init__(self, steps):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1))
            self.train_ds = dataset("train.bin", seed=1, steps=steps)
            self.val_ds = dataset("val.bin", seed=0, steps=3)
            self.record = {{"train": {{}}, "val": [], "saved": {{}}}}

        def train_dataloader(self):
            return DataLoader(self.train_ds, batch_size=None, num_workers=2)

        def val_dataloader(self):
            return DataLoader(self.val_ds, batch_size=None, num_workers=2)

        def training_step(self, batch, index):
            self.record["train"][self.global_step] = digest(batch)
            return self.w * batch["x"].float().mean()

        def on_validation_epoch_start(self):
            self.record["val"].append([])

        def validation_step(self, batch, index):
            self.record["val"][-1].append(digest(batch))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def on_save_checkpoint(self, checkpoint):
            checkpoint["data"] = {{"train": self.train_ds.state_dict(),
                                  "val": self.val_ds.state_dict()}}
            self.record["saved"][self.global_step] = {{
                k: s["step"] for k, s in checkpoint["data"].items()}}

        def on_load_checkpoint(self, checkpoint):
            self.train_ds.load_state_dict(checkpoint["data"]["train"])
            self.val_ds.load_state_dict(checkpoint["data"]["val"])

    def fit(steps, max_steps, ckpt=None, every=None):
        callbacks = [] if every is None else [ModelCheckpoint(
            dirpath=D / every, every_n_train_steps=3, save_top_k=-1, filename="{{step}}")]
        model = Model(steps)
        L.Trainer(accelerator="cpu", devices=1, max_steps=max_steps, max_epochs=1,
                  logger=False, enable_progress_bar=False, enable_model_summary=False,
                  default_root_dir=D, num_sanity_val_steps=2, val_check_interval=4,
                  enable_checkpointing=every is not None, callbacks=callbacks,
                  ).fit(model, ckpt_path=ckpt)
        print(json.dumps(model.record), flush=True)

    fit(12, -1, every="sized")
    fit(12, -1, ckpt=D / "sized" / "step=3.ckpt")
    fit(12, -1, ckpt=D / "sized" / "step=6.ckpt")
    fit(None, 7, every="stream")
    fit(None, 7, ckpt=D / "stream" / "step=3.ckpt")

if __name__ == "__main__":
    main()
"""

Record = dict[str, Any]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[Record]:
    root = tmp_path_factory.mktemp("lightning_stock")
    rng = np.random.default_rng(0)
    rng.integers(0, 50_000, 12 * 4 * 8 + 1, dtype=np.uint16).tofile(root / "train.bin")
    rng.integers(0, 50_000, 3 * 4 * 8 + 1, dtype=np.uint16).tofile(root / "val.bin")
    script = root / "stock_state.py"
    script.write_text(_SCRIPT.format(root=str(root)))
    # Five fits with forked workers: about a minute alone; the bound is on a hang.
    done: subprocess.CompletedProcess[str] = run_script(script, timeout=480)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [json.loads(s) for s in done.stdout.splitlines() if s.startswith("{")]
    assert len(lines) == 5, done.stdout
    return lines


def test_val_state_after_the_sanity_check_names_where_the_next_validation_starts(
    runs: list[Record],
) -> None:
    """It raised StateError once the sanity check's workers had handed over a batch."""
    whole = runs[0]
    assert {step: s["val"] for step, s in whole["saved"].items()} == {
        "3": 0,
        "6": 0,
        "9": 0,
        "12": 0,
    }, whole["saved"]
    # The sanity check (2 batches), then 3 validations of all 3 batches.
    first = whole["val"][1]
    assert len(first) == 3 and whole["val"] == [first[:2], first, first, first], whole["val"]


def test_training_state_resumes_at_the_step_the_training_step_reached(
    runs: list[Record],
) -> None:
    """Each checkpoint names the step after the last batch trained on; the resumed fits
    train on the uninterrupted fit's batches from there."""
    whole, at3, at6, stream, stream3 = runs
    assert {step: s["train"] for step, s in whole["saved"].items()} == {
        "3": 3,
        "6": 6,
        "9": 9,
        "12": 12,
    }, whole["saved"]
    assert len(set(whole["train"].values())) == 12
    later = {step: d for step, d in whole["train"].items() if int(step) >= 3}
    assert at3["train"] == later
    assert at6["train"] == {step: d for step, d in later.items() if int(step) >= 6}
    # Resumed (no sanity check then), the validations at steps 8 and 12: the whole pass.
    assert at6["val"] == whole["val"][2:], at6["val"]
    # Without len(), Lightning's fetcher holds the next batch: not counted.
    assert {step: s["train"] for step, s in stream["saved"].items()} == {"3": 3, "6": 6}
    assert stream3["train"] == {step: d for step, d in stream["train"].items() if int(step) >= 3}
