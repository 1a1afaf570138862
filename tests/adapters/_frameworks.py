"""What the framework scripts (accelerate_train.py, lightning_train.py, hf_trainer_train.py)
share: the loader's settings, a tiny model, what each rank writes for the test, and their
command line."""

from __future__ import annotations

import gc
import hashlib
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from _adapter_data import BATCH, L, token_source

from headrace.formats import TokenSource
from headrace.testing import batch_digest
from headrace.torch import TorchDataset

SEED = 5
STEPS, SAVE_AT = 6, 3


def dataset(root: Path, *, sized: bool = False, **kw: Any) -> TorchDataset:
    """This rank's share of the global batches (rank and world size from torch.distributed);
    ``steps=None`` unless ``sized``: a run that ends at the trainer's max_steps."""
    return TorchDataset(
        token_source(root), batch_size=BATCH, seed=SEED, steps=STEPS + 2 if sized else None, **kw
    )


def val_source(root: Path) -> TokenSource:
    """An evaluation set: the windows of ``b.bin`` in order (``epochs=1``: one exact pass)."""
    return TokenSource([root / "b.bin"], dtype="uint32", context=L, shuffle=False)


def digest(batch: dict[str, torch.Tensor]) -> str:
    return batch_digest([{k: v.numpy() for k, v in batch.items()}])


class Net(torch.nn.Module):
    """An embedding trained to pull each token's vector towards its label's."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.emb = torch.nn.Embedding(1000, 4)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return (self.emb(x.long()) - self.emb(y.long()).detach()).pow(2).mean()


def params_digest(model: torch.nn.Module) -> str:
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().cpu().numpy().tobytes())
    return h.hexdigest()


def write(out: Path, mode: str, rank: int, model: torch.nn.Module, **fields: Any) -> None:
    """OUT/{mode}-{rank}.json: ``fields``, and ``params``, the digest of ``model``'s."""
    (out / f"{mode}-{rank}.json").write_text(json.dumps({**fields, "params": params_digest(model)}))


def script(main: Callable[..., None]) -> None:
    """``main(ROOT, OUT, MODE, *rest)`` from the command line, then :func:`end`, with
    main's trainer and DDP model gone."""
    main(Path(sys.argv[1]), Path(sys.argv[2]), *sys.argv[3:])
    end()


def end() -> None:
    """End the process group, once the caller has dropped its DDP model and trainer.

    None of the trainers ends it; left to the interpreter's exit with a DDP model still
    alive, a process aborted ("terminate called without an active exception") or hung
    in gloo's destructor now and then (as tests/adapters/dcp_train.py found)."""
    gc.collect()
    if dist.is_initialized():
        dist.barrier()  # both ranks done: no collective of one left waiting on the other
        dist.destroy_process_group()
