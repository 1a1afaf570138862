"""Run under torchrun: an exact evaluation pass, its metric reduced over ranks (gloo).

    python -m torch.distributed.run --standalone --nproc_per_node=2 eval_gloo.py ROOT OUT B

Each rank sums a per-sample "loss" (the mean of its ``y`` tokens) over its valid
rows and counts them; ``all_reduce`` of both gives the metric of the whole pass.
Rank 0 writes the reduced sum and count, and every rank's valid sample numbers,
to OUT/eval.json.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from _adapter_data import token_source

from headrace.torch import HeadraceDataLoader, TorchDataset


def main(root: Path, out: Path, b: int) -> None:
    dist.init_process_group("gloo")
    world = dist.get_world_size()
    ds = TorchDataset(token_source(root, shuffle=False), batch_size=b, epochs=1)
    total = torch.zeros(2, dtype=torch.float64)  # sum of losses, count of samples
    samples: list[int] = []
    with HeadraceDataLoader(ds, num_workers=2) as dl:
        for batch in dl:
            loss = batch["y"].double().mean(dim=1)  # one "loss" per sample
            ok = batch["valid"]
            total += torch.stack([loss[ok].sum(), ok.sum().double()])
            samples += batch["sample"][ok].tolist()
    dist.all_reduce(total)
    gathered: list[object] = [None] * world
    dist.all_gather_object(gathered, samples)
    if dist.get_rank() == 0:
        out.joinpath("eval.json").write_text(
            json.dumps({"sum": total[0].item(), "count": total[1].item(), "samples": gathered})
        )
    dist.destroy_process_group()


if __name__ == "__main__":
    r, o, n = sys.argv[1:]
    main(Path(r), Path(o), int(n))
