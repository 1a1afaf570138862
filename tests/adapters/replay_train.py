"""A tiny model trained on headrace batches, checkpointed with its loader state.

Imported by ``test_replay.py`` and run by it as a script in a fresh process::

    python replay_train.py ROOT UNTIL WORKERS SOURCE:CKPT_IN:OUT [SOURCE:CKPT_IN:OUT ...]

for each ``SOURCE``, resumes from ``CKPT_IN`` (model, optimizer and loader state in
one ``torch.save`` file), trains to step ``UNTIL`` and saves the model to ``OUT``.
"""

from __future__ import annotations

import sys
from itertools import islice
from pathlib import Path
from typing import Any

import torch
from _adapter_data import BATCH, IGNORE, SOURCES

from headrace.torch import HeadraceDataLoader, TorchDataset

VOCAB = 1000


def setup(root: Path, source: str, workers: int) -> tuple[Any, Any, HeadraceDataLoader]:
    torch.manual_seed(0)
    torch.set_num_threads(1)  # the same reduction order in every process
    model = torch.nn.Sequential(torch.nn.Embedding(VOCAB, 16), torch.nn.Linear(16, VOCAB))
    optim = torch.optim.Adam(model.parameters(), lr=1e-2)
    ds = TorchDataset(SOURCES[source](root), batch_size=BATCH, seed=11)  # type: ignore[arg-type]
    return model, optim, HeadraceDataLoader(ds, num_workers=workers)


def train(model: Any, optim: Any, dl: HeadraceDataLoader, until: int) -> None:
    for batch in islice(dl, until - dl.step):
        x, y = batch["x"].long(), batch["y"].long()
        # Padded rows mark ignored targets with IGNORE (token streams have none).
        loss = torch.nn.functional.cross_entropy(
            model(x).flatten(0, 1), y.flatten(), ignore_index=IGNORE
        )
        optim.zero_grad()
        loss.backward()
        optim.step()


def save(path: Path, model: Any, optim: Any, dl: HeadraceDataLoader) -> None:
    ckpt = {"model": model.state_dict(), "optim": optim.state_dict(), "data": dl.state_dict()}
    torch.save(ckpt, path)


def resume(root: Path, source: str, ckpt: Path, until: int, workers: int, out: Path) -> None:
    model, optim, dl = setup(root, source, workers)
    state = torch.load(ckpt)
    model.load_state_dict(state["model"])
    optim.load_state_dict(state["optim"])
    dl.load_state_dict(state["data"])
    train(model, optim, dl, until)
    torch.save(model.state_dict(), out)


if __name__ == "__main__":
    r, u, w, *runs = sys.argv[1:]
    for run in runs:
        s, c, o = run.split(":")
        resume(Path(r), s, Path(c), int(u), int(w), Path(o))
