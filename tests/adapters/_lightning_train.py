"""What lightning_train.py runs under torchrun (2 CPU processes, gloo): a tiny model
trained with Lightning (``Trainer(accelerator="cpu", devices=WORLD_SIZE, strategy="ddp")``)
on a HeadraceDataLoader without ``len()``, checkpointed by ModelCheckpoint every SAVE_AT
steps.

    lightning_train.py ROOT OUT first|resume VARIANT...

``first`` trains SAVE_AT steps on a stock ``DataLoader(ds, batch_size=None)``, then
STEPS steps on a HeadraceDataLoader, validating every 2 steps on a stock
``DataLoader`` over an exact pass (``epochs=1``: the whole pass every time). ``resume``,
in a new process, first resumes the stock run from its checkpoint at SAVE_AT (refused:
Lightning restores no state into a stock DataLoader), then the other, which Lightning
restores, and trains on to STEPS (the validation loader, not restored, is not refused).
Each rank writes the digests of the batches its training_step got and of the final
parameters to OUT/VARIANT/{mode}-{rank}.json. VARIANT: ``plain`` (the runs above);
``workers``: only the HeadraceDataLoader's runs, with ``num_workers=2`` and chunks of
one step; ``own-loop``: every run's ``trainer.fit_loop`` is a user's subclass of
Lightning's; ``epochs`` (``resume`` only, the lighter phase): lightning_epochs.py's two
fits, the second resumed from the first's checkpoint in the same process. Several
variants run one after the other in the same processes: each process start imports
Lightning, which takes most of a run's time (``import lightning``: 9.4 s CPU a process,
2c, 2026-12-04).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import lightning as L
import torch
from _adapter_data import BATCH
from _frameworks import (
    SAVE_AT,
    SEED,
    STEPS,
    Net,
    dataset,
    digest,
    val_source,
    write,
)
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loops.fit_loop import _FitLoop
from lightning_epochs import main as epochs
from torch.utils.data import DataLoader

from headrace.errors import ConfigError
from headrace.torch import HeadraceDataLoader, TorchDataset


class Module(L.LightningModule):
    def __init__(self, root: Path, stock: bool, workers: int) -> None:
        super().__init__()
        self.net, self.root, self.stock, self.seen, self.val = Net(), root, stock, [], []
        self.workers = workers

    def train_dataloader(self) -> Any:
        # Made here, after Lightning initialised torch.distributed.
        if self.stock:
            return DataLoader(dataset(self.root), batch_size=None)
        # With workers, a chunk a step: the steps alternate between them.
        ds = dataset(self.root, chunk_steps=1) if self.workers else dataset(self.root)
        return HeadraceDataLoader(ds, num_workers=self.workers)

    def val_dataloader(self) -> Any:
        # Not resumed by Lightning, nor meant to be: a resumed run must not refuse it.
        ds = TorchDataset(val_source(self.root), batch_size=BATCH, seed=SEED, epochs=1)
        return DataLoader(ds, batch_size=None)

    def validation_step(self, batch: dict[str, torch.Tensor], index: int) -> None:
        self.val.append(digest(batch))

    def training_step(self, batch: dict[str, torch.Tensor], index: int) -> torch.Tensor:
        self.seen.append(digest(batch))
        return self.net(batch["x"], batch["y"])

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.5)


class OwnFitLoop(_FitLoop):
    """A user's fit loop, in ``trainer.fit_loop``: the wrapper checks must know it for
    Lightning's."""


def fit(
    root: Path, out: Path, *, stock: bool, ckpt: Path | None, steps: int = STEPS, variant: str = ""
) -> tuple[Module, L.Trainer]:
    module = Module(root, stock, workers=2 if variant == "workers" else 0)
    every = ModelCheckpoint(
        dirpath=out, every_n_train_steps=SAVE_AT, save_top_k=-1, filename="{step}"
    )
    trainer = L.Trainer(
        accelerator="cpu",
        devices=int(os.environ["WORLD_SIZE"]),  # torchrun's
        strategy="ddp",
        max_steps=steps,
        val_check_interval=2,
        check_val_every_n_epoch=None,
        num_sanity_val_steps=0,
        callbacks=[every],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=True,
    )
    if variant == "own-loop":
        loop = trainer.fit_loop
        own = OwnFitLoop(trainer, min_epochs=loop.min_epochs, max_epochs=loop.max_epochs)
        own.epoch_loop, trainer.fit_loop = loop.epoch_loop, own
    trainer.fit(module, ckpt_path=ckpt)
    return module, trainer


def refusal(exc: BaseException | None) -> str:
    """The ConfigError in ``exc``'s chain (Lightning's teardown may raise after it)."""
    while exc is not None:
        if isinstance(exc, ConfigError):
            return str(exc)
        exc = exc.__context__
    return ""


def stock_runs(root: Path, out: Path, mode: str, ckpt: Path, variant: str) -> dict[str, Any]:
    """The stock DataLoader's: its batches (``first``, saving the checkpoint that ``resume``
    is refused from) or its refusal."""
    if mode == "first":
        stock, _ = fit(root, out / "stock", stock=True, ckpt=None, steps=SAVE_AT, variant=variant)
        return {"stock_seen": stock.seen}
    try:
        fit(root, out / "stock", stock=True, ckpt=out / "stock" / ckpt.name, variant=variant)
    except Exception as exc:
        return {"stock": refusal(exc) or repr(exc)}
    return {"stock": ""}


def main(root: Path, out: Path, mode: str, *variants: str) -> None:
    for variant in variants:
        if variant == "epochs":  # both of its fits in one process: nothing to resume
            if mode == "resume":
                (out / variant).mkdir(exist_ok=True)
                epochs(root, out / variant)
        else:
            run(root, out / variant, mode, variant)


def run(root: Path, out: Path, mode: str, variant: str) -> None:
    out.mkdir(exist_ok=True)
    ckpt = out / f"step={SAVE_AT}.ckpt"
    found = {} if variant == "workers" else stock_runs(root, out, mode, ckpt, variant)
    resume = ckpt if mode == "resume" else None
    module, trainer = fit(root, out, stock=False, ckpt=resume, variant=variant)
    rank = trainer.global_rank
    write(out, mode, rank, module.net, seen=module.seen, val=module.val, refused=found)
