"""Run under torchrun: each rank reads its slice; rank 0 writes the gathered global batches.

    python -m torch.distributed.run --standalone --nproc_per_node=4 \\
        torchrun_slices.py ROOT OUT save|resume STEPS SAVE_AT

``save`` writes the loader state reached at step SAVE_AT to OUT/state.json;
``resume`` starts from it. Rank 0 writes the digest of each gathered global
batch to OUT/digests-{mode}.json.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch.distributed as dist
from _adapter_data import BATCH, token_source

from headrace.testing import batch_digest
from headrace.torch import HeadraceDataLoader, TorchDataset


def main(root: Path, out: Path, mode: str, steps: int, save_at: int) -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    # rank and world size come from torch.distributed, as in a real job.
    dl = HeadraceDataLoader(TorchDataset(token_source(root), batch_size=BATCH, seed=5, steps=steps))
    if mode == "resume":
        dl.load_state_dict(json.loads((out / "state.json").read_text()))
    digests = []
    for batch in dl:
        local = {k: v.numpy() for k, v in batch.items()}
        parts: list[dict[str, np.ndarray]] = [{} for _ in range(world)]
        dist.all_gather_object(parts, local)
        glued = {k: np.concatenate([p[k] for p in parts]) for k in local}
        digests.append(batch_digest([glued]))
        if mode == "save" and dl.step == save_at:
            states: list[object] = [None] * world
            dist.all_gather_object(states, dl.state_dict())
            assert all(s == states[0] for s in states), states
            if rank == 0:
                (out / "state.json").write_text(json.dumps(states[0]))
    if rank == 0:
        (out / f"digests-{mode}.json").write_text(json.dumps({"world": world, "d": digests}))
    dist.destroy_process_group()


if __name__ == "__main__":
    r, o, m, n, k = sys.argv[1:]
    main(Path(r), Path(o), m, int(n), int(k))
