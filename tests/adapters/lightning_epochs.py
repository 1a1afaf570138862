"""Lightning trains 2 epochs of an exact pass (``epochs=1``) on a stock ``DataLoader``,
checkpointed at each epoch's end (ModelCheckpoint's default), then a new trainer resumes
from the first epoch's checkpoint: on one CPU process, or on torchrun's ranks (DDP).

    lightning_epochs.py ROOT OUT

(The tests run ``main`` in lightning_train.py's 2-rank processes, as its ``epochs``
variant: no Lightning import of its own.)

Resumed at an epoch's end, the stock loader starts the pass over, as the uninterrupted
run's second epoch did: not refused. Each rank writes the batch digests of both runs'
training steps, by epoch, to OUT/epochs-{rank}.json.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import lightning as L
import torch
from _adapter_data import BATCH
from _frameworks import Net, digest, val_source
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader

from headrace.torch import TorchDataset

WORLD = int(os.environ.get("WORLD_SIZE", "1"))  # torchrun's, where it started this process


class Module(L.LightningModule):
    def __init__(self, root: Path) -> None:
        super().__init__()
        self.net, self.root, self.seen = Net(), root, []

    def train_dataloader(self) -> Any:
        ds = TorchDataset(val_source(self.root), batch_size=BATCH, seed=1, epochs=1)
        return DataLoader(ds, batch_size=None)

    def training_step(self, batch: dict[str, torch.Tensor], index: int) -> torch.Tensor:
        self.seen.append([self.current_epoch, digest(batch)])
        return self.net(batch["x"], batch["y"])

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.5)


def fit(root: Path, out: Path, ckpt: Path | None) -> Module:
    module = Module(root)
    every = ModelCheckpoint(dirpath=out, save_top_k=-1, filename="{epoch}")
    trainer = L.Trainer(
        accelerator="cpu",
        devices=WORLD,
        strategy="ddp" if WORLD > 1 else "auto",
        max_epochs=2,
        callbacks=[every],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(module, ckpt_path=ckpt)
    return module


def main(root: Path, out: Path) -> None:
    first = fit(root, out, None)
    try:
        resumed: Any = fit(root, out, out / "epoch=0.ckpt").seen
    except Exception as exc:
        resumed = repr(exc)
    rank = os.environ.get("RANK", "0")
    (out / f"epochs-{rank}.json").write_text(json.dumps({"first": first.seen, "resumed": resumed}))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
