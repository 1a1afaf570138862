"""Lightning on HeadraceDataLoader(num_workers=2): epochs with persistent workers or new ones.

Run: PYTHONPATH=src python benchmarks/lightning_persistent.py [--rounds 2] [--epochs 3]

``Trainer.fit`` calls ``iter()`` on the training loader once an epoch. Each
trial is a fresh process that fits a tiny model for ``--epochs`` epochs of an
exact pass (``TorchDataset(epochs=1)``: every epoch the whole pass), with
``persistent_workers`` False or True, alternating (A/B/A/B). Printed per side:
seconds from each epoch's start to its first batch (median over epochs 2 on,
min-max), the whole fit's seconds, and the SHA-256 of every step's
``(epoch, batch)`` (the same on both sides).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from pathlib import Path
from typing import Any

import lightning as L  # at the top, as a training script has it: each new worker imports it
import numpy as np
import torch
from _children import alternate, side_figures, spread
from _out import out

FILE = Path("/tmp/headrace-bench-lightning-persistent.u16")


class Module(L.LightningModule):
    def __init__(self, persistent: bool) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(1 << 16, 8)
        self.persistent = persistent
        self.digest = hashlib.sha256()
        self.firsts: list[float] = []
        self.t0 = 0.0

    def train_dataloader(self) -> Any:
        from headrace import torch as ht
        from headrace.formats import TokenSource

        source = TokenSource(FILE, dtype="uint16", context=256)
        ds = ht.TorchDataset(source, batch_size=32, seed=1, epochs=1)
        return ht.HeadraceDataLoader(ds, num_workers=2, persistent_workers=self.persistent)

    def on_train_epoch_start(self) -> None:
        self.t0 = time.perf_counter()

    def training_step(self, batch: dict[str, torch.Tensor], index: int) -> torch.Tensor:
        if index == 0:
            self.firsts.append(time.perf_counter() - self.t0)
        self.digest.update(f"{self.current_epoch}".encode() + batch["x"].numpy().tobytes())
        return self.emb(batch["x"].long()).mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def child(persistent: bool, epochs: int) -> None:
    module = Module(persistent)
    t0 = time.perf_counter()
    L.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=epochs,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    ).fit(module)
    fit_s = time.perf_counter() - t0
    print(
        json.dumps(
            {"firsts": module.firsts, "fit_s": fit_s, "digest": module.digest.hexdigest()[:16]}
        )
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--child", choices=["fresh", "persistent"])
    a = ap.parse_args()
    if a.child:
        child(a.child == "persistent", a.epochs)
        return
    if not FILE.exists():
        np.arange(1 << 20, dtype=np.uint16).tofile(FILE)  # 2 MiB: 128 steps an epoch
    sides = ["fresh", "persistent"]
    got = alternate(__file__, sides, a.rounds, ["--epochs", str(a.epochs)])
    for s in sides:
        later, digests = side_figures(got[s])
        fits = [float(g["fit_s"]) for g in got[s]]
        out(
            f"{s:10} epochs 2+ start to first batch {spread(later)} s; "
            f"fit {spread(fits, 1)} s; digests {digests}"
        )


if __name__ == "__main__":
    main()
