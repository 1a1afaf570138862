"""Run under torchrun (2 CPU processes, gloo): a tiny model trained with the Hugging Face
Trainer on a HeadraceDataLoader (get_train_dataloader overridden), its state saved into
each checkpoint folder by a callback.

    hf_trainer_train.py ROOT OUT first|resume

``first`` checks that ``Trainer(train_dataset=TorchDataset(...))`` is refused (the Trainer
prepares its own DataLoader with accelerate), then trains STEPS steps, checkpointing
every SAVE_AT. ``resume``, in a new process, checks that resuming without
``ignore_data_skip=True`` is refused (the Trainer's fast-forward would skip the batches
again), then resumes from checkpoint-SAVE_AT with it and trains on to STEPS. Each rank
writes the digests of the batches its model got and of the final parameters to
OUT/{mode}-{rank}.json.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from _frameworks import SAVE_AT, STEPS, Net, dataset, digest, script, write
from transformers import Trainer, TrainerCallback, TrainingArguments

from headrace.errors import ConfigError
from headrace.torch import HeadraceDataLoader

DATA_STATE = "headrace.json"  # the loader's state, in each checkpoint-N folder


class Model(torch.nn.Module):
    """Net, returning the loss as the Trainer wants it, and noting each batch it gets."""

    def __init__(self) -> None:
        super().__init__()
        self.net, self.seen = Net(), []

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
        self.seen.append(digest({"x": x, "y": y}))
        return {"loss": self.net(x, y)}


class SaveDataState(TrainerCallback):
    """Writes the loader's state into the checkpoint folder the Trainer has just saved."""

    def __init__(self, loader: HeadraceDataLoader) -> None:
        self.loader = loader

    def on_save(self, args: TrainingArguments, state: Any, control: Any, **kw: Any) -> None:
        if state.is_world_process_zero:  # the same state on every rank
            folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            (folder / DATA_STATE).write_text(json.dumps(self.loader.state_dict()))


class HeadraceTrainer(Trainer):
    def __init__(self, *args: Any, loader: HeadraceDataLoader, **kw: Any) -> None:
        super().__init__(*args, callbacks=[SaveDataState(loader)], **kw)
        self.loader = loader

    def get_train_dataloader(self) -> Any:
        return self.loader  # not prepared by accelerate: it already holds this rank's rows


def arguments(out: Path, **kw: Any) -> TrainingArguments:
    return TrainingArguments(
        output_dir=str(out),
        max_steps=STEPS,
        save_steps=SAVE_AT,
        use_cpu=True,
        report_to="none",
        disable_tqdm=True,
        logging_steps=STEPS,
        **kw,
    )


def main(root: Path, out: Path, mode: str) -> None:
    found = {}
    ckpt = out / f"checkpoint-{SAVE_AT}"
    if mode == "first":
        try:
            args = arguments(out / "stock")
            Trainer(model=Model(), args=args, train_dataset=dataset(root)).train()
        except ConfigError as exc:
            found["stock"] = str(exc)
    else:
        args = arguments(out)  # first: it initialises torch.distributed, which the dataset asks
        loader = HeadraceDataLoader(dataset(root))
        loader.load_state_dict(json.loads((ckpt / DATA_STATE).read_text()))
        trainer = HeadraceTrainer(model=Model(), args=args, loader=loader)
        try:
            trainer.train(resume_from_checkpoint=str(ckpt))
        except ConfigError as exc:
            found["skip"] = str(exc)
    args = arguments(out, ignore_data_skip=True)
    loader = HeadraceDataLoader(dataset(root))
    if mode == "resume":
        loader.load_state_dict(json.loads((ckpt / DATA_STATE).read_text()))
    model = Model()
    trainer = HeadraceTrainer(model=model, args=args, loader=loader)
    trainer.train(resume_from_checkpoint=str(ckpt) if mode == "resume" else None)
    write(out, mode, trainer.args.process_index, model.net, seen=model.seen, refused=found)


if __name__ == "__main__":
    script(main)
