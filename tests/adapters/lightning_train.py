"""Run under torchrun (2 CPU processes, gloo): a tiny model trained with Lightning
(``Trainer(accelerator="cpu", devices=2, strategy="ddp")``) on a HeadraceDataLoader
without ``len()``, checkpointed by ModelCheckpoint every SAVE_AT steps.

    lightning_train.py ROOT OUT first|resume

``first`` trains SAVE_AT steps on a stock ``DataLoader(ds, batch_size=None)``, then
STEPS steps on a HeadraceDataLoader, validating every 2 steps on a stock
``DataLoader`` over an exact pass (``epochs=1``: the whole pass every time). ``resume``,
in a new process, first resumes the stock run from its checkpoint at SAVE_AT (refused:
Lightning restores no state into a stock DataLoader), then the other, which Lightning
restores, and trains on to STEPS (the validation loader, not restored, is not refused).
Each rank writes the digests of the batches its training_step got and of the final
parameters to OUT/{mode}-{rank}.json.
"""

from __future__ import annotations

import sys
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
    end,
    params_digest,
    val_source,
    write,
)
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader

from headrace.errors import ConfigError
from headrace.torch import HeadraceDataLoader, TorchDataset


class Module(L.LightningModule):
    def __init__(self, root: Path, stock: bool) -> None:
        super().__init__()
        self.net, self.root, self.stock, self.seen, self.val = Net(), root, stock, [], []

    def train_dataloader(self) -> Any:
        ds = dataset(self.root)  # made here, after Lightning initialised torch.distributed
        return DataLoader(ds, batch_size=None) if self.stock else HeadraceDataLoader(ds)

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


def fit(
    root: Path, out: Path, *, stock: bool, ckpt: Path | None, steps: int = STEPS
) -> tuple[Module, L.Trainer]:
    module = Module(root, stock)
    every = ModelCheckpoint(
        dirpath=out, every_n_train_steps=SAVE_AT, save_top_k=-1, filename="{step}"
    )
    trainer = L.Trainer(
        accelerator="cpu",
        devices=2,
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
    trainer.fit(module, ckpt_path=ckpt)
    return module, trainer


def refusal(exc: BaseException | None) -> str:
    """The ConfigError in ``exc``'s chain (Lightning's teardown may raise after it)."""
    while exc is not None:
        if isinstance(exc, ConfigError):
            return str(exc)
        exc = exc.__context__
    return ""


def main(root: Path, out: Path, mode: str) -> None:
    found = {}
    ckpt = out / f"step={SAVE_AT}.ckpt"
    if mode == "first":  # a checkpoint of a run on a stock DataLoader, for the refusal
        stock, _ = fit(root, out / "stock", stock=True, ckpt=None, steps=SAVE_AT)
        found["stock_seen"] = stock.seen
    else:
        try:
            fit(root, out / "stock", stock=True, ckpt=out / "stock" / ckpt.name)
        except Exception as exc:
            found["stock"] = refusal(exc) or repr(exc)
    module, trainer = fit(root, out, stock=False, ckpt=ckpt if mode == "resume" else None)
    write(
        out,
        mode,
        trainer.global_rank,
        seen=module.seen,
        val=module.val,
        params=params_digest(module.net),
        refused=found,
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3])
    end()  # with main's trainer and DDP model gone
