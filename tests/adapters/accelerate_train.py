"""Run under torchrun (2 CPU processes, gloo): a tiny model trained with Hugging Face
accelerate on a HeadraceDataLoader, checkpointed with accelerator.save_state.

    accelerate_train.py ROOT OUT first|resume [hf]

With ``hf``, the same processes then run hf_trainer_train.py's phase into OUT/hf: the
Hugging Face Trainer's ranks start (and import torch and accelerate) once for both
trainers instead of twice, and its resume runs under accelerate's launcher as this
script's does.

``first`` checks first that accelerate's prepare() of a stock DataLoader over the
dataset is refused (dispatch_batches, the default; and dispatch_batches=False), then
trains STEPS steps, saving the state at SAVE_AT. ``resume`` restores it with
accelerator.load_state in a new process, checks that skip_first_batches is refused, and
trains on to STEPS. Each rank writes the digest of every batch it trained on and of the
final parameters to OUT/{mode}-{rank}.json.
"""

from __future__ import annotations

from pathlib import Path

import torch
from _adapter_data import widen
from _frameworks import SAVE_AT, STEPS, Net, dataset, digest, script, write
from accelerate import Accelerator
from accelerate.utils import DataLoaderConfiguration
from torch.utils.data import DataLoader

from headrace.errors import ConfigError
from headrace.torch import HeadraceDataLoader


def refused(root: Path, **config: bool) -> str:
    """The ConfigError of iterating a stock DataLoader that accelerate prepared ('' if none)."""
    acc = Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(**config))
    # int64 fields (gloo broadcasts them; it cannot send uint32 tokens) and a batch size
    # where accelerate needs one (IterableDatasetShard multiplies it).
    batch_size = None if config.get("dispatch_batches", True) else 1
    dl = acc.prepare(DataLoader(dataset(root, transform=widen), batch_size=batch_size))
    try:
        next(iter(dl))
    except ConfigError as exc:
        return str(exc)
    return ""


def main(root: Path, out: Path, mode: str, *also: str) -> None:
    train(root, out, mode)
    if "hf" in also:
        from hf_trainer_train import main as hf_trainer

        (out / "hf").mkdir(exist_ok=True)
        hf_trainer(root, out / "hf", mode)


def train(root: Path, out: Path, mode: str) -> None:
    found = {}
    if mode == "first":
        found["dispatch"] = refused(root)
        found["shard"] = refused(root, dispatch_batches=False)
    acc = Accelerator(cpu=True)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    loader = HeadraceDataLoader(dataset(root))
    model, opt, dl = acc.prepare(model, opt, loader)
    assert dl is loader, type(dl)  # prepare() hands a HeadraceDataLoader back as it is
    acc.register_for_checkpointing(dl)
    if mode == "resume":
        acc.load_state(str(out / "ckpt"))
        try:
            next(iter(acc.skip_first_batches(dl, SAVE_AT)))
        except ConfigError as exc:
            found["skip"] = str(exc)
    seen = []
    for batch in dl:
        batch = {k: v.to(acc.device) for k, v in batch.items()}
        seen.append(digest(batch))
        loss = model(batch["x"], batch["y"])
        acc.backward(loss)
        opt.step()
        opt.zero_grad()
        if mode == "first" and dl.step == SAVE_AT:
            acc.save_state(str(out / "ckpt"))
        if dl.step == STEPS:
            break
    write(out, mode, acc.process_index, model, seen=seen, refused=found)


if __name__ == "__main__":
    script(main)
