"""Run under torchrun: DDP training whose model, optimizer and loader go into one
``torch.distributed.checkpoint`` (DCP) checkpoint, as torchtitan saves them. (The tests
run each rank as ``python dcp_train.py`` in torchrun's environment, without its agent:
``_adapter_data.ranks``.)

    python -m torch.distributed.run --standalone --nproc_per_node=2 \\
        dcp_train.py ROOT save|resume STEPS SAVE_AT OUT:SOURCE:HOW [OUT:SOURCE:HOW ...]

``save`` trains to STEPS and saves at step SAVE_AT to OUT/ckpt; ``resume`` loads it
and trains on to STEPS. Each OUT:SOURCE:HOW is a run of its own, one after another in
the same processes and process group (a launch of 2 ranks costs more than a run).
``HOW`` keys the loader's state: ``adapter`` passes
``DCPStateful(dl)`` (one JSON leaf, the same on every rank); ``per-rank`` wraps the
loader as torchtitan's dataloader does (a key of each rank's own, its state pickled).
Rank 0 writes the digest of each gathered global batch
and the final weights to OUT/{mode}-{world}.json / .pt.
"""

from __future__ import annotations

import gc
import json
import pickle
import sys
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from _adapter_data import BATCH, IGNORE, SOURCES
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.checkpoint.stateful import Stateful
from torch.nn.parallel import DistributedDataParallel

from headrace.testing import batch_digest
from headrace.torch import DCPStateful, HeadraceDataLoader, TorchDataset


class PerRank(Stateful):
    """torchtitan's ``ParallelAwareDataloader`` keying: ``{"dp_rank_<r>": pickled state}``."""

    def __init__(self, dl: HeadraceDataLoader, rank: int) -> None:
        self.dl, self.key = dl, f"dp_rank_{rank}"

    def state_dict(self) -> dict[str, Any]:
        return {self.key: pickle.dumps(self.dl.state_dict())}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.dl.load_state_dict(pickle.loads(state[self.key]))


class Trainer(Stateful):
    """Model and optimizer through DCP's own state-dict helpers (as torchtitan does)."""

    def __init__(self, model: Any, optim: Any) -> None:
        self.model, self.optim = model, optim

    def state_dict(self) -> dict[str, Any]:
        model, optim = get_state_dict(self.model, self.optim)
        return {"model": model, "optim": optim}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        set_state_dict(
            self.model, self.optim, model_state_dict=state["model"], optim_state_dict=state["optim"]
        )


def main(root: Path, out: Path, mode: str, source: str, how: str, steps: int, at: int) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    net = torch.nn.Sequential(torch.nn.Embedding(1000, 16), torch.nn.Linear(16, 1000))
    model = DistributedDataParallel(net)
    optim = torch.optim.Adam(model.parameters(), lr=1e-2)
    ds = TorchDataset(SOURCES[source](root), batch_size=BATCH, seed=5, steps=steps)  # type: ignore[arg-type]
    dl = HeadraceDataLoader(ds)
    loader = DCPStateful(dl) if how == "adapter" else PerRank(dl, rank)
    states = {"train": Trainer(model, optim), "dataloader": loader}
    if mode == "resume":
        dcp.load(states, checkpoint_id=str(out / "ckpt"))
        assert dl.step == at, (dl.step, at)
    digests = []
    for batch in islice(dl, steps - dl.step):
        parts: list[dict[str, np.ndarray]] = [{} for _ in range(world)]
        dist.all_gather_object(parts, {k: v.numpy() for k, v in batch.items()})
        digests.append(batch_digest([{k: np.concatenate([p[k] for p in parts]) for k in parts[0]}]))
        x, y = batch["x"].long(), batch["y"].long()
        loss = torch.nn.functional.cross_entropy(
            model(x).flatten(0, 1), y.flatten(), ignore_index=IGNORE
        )
        optim.zero_grad()
        loss.backward()
        optim.step()
        if mode == "save" and dl.step == at:
            dcp.save(states, checkpoint_id=str(out / "ckpt"))
    if rank == 0:
        (out / f"{mode}-{world}.json").write_text(json.dumps(digests))
        torch.save(net.state_dict(), out / f"{mode}-{world}.pt")
    # DDP holds the process group: freed only at interpreter exit, gloo's destructor there
    # joined its run-loop thread, which waited for the GIL (1 run in 4 hung; gdb).
    del states, model, optim
    gc.collect()


if __name__ == "__main__":
    r, m, n, k, *runs = sys.argv[1:]
    dist.init_process_group("gloo")
    for spec in runs:
        o, s, h = spec.split(":")
        main(Path(r), Path(o), m, s, h, int(n), int(k))
    dist.destroy_process_group()
