"""A parent whose loader workers must outlive it by no more than a moment.

Run by ``test_torch_lifecycle.py``, which SIGKILLs it::

    python orphan_parent.py ROOT

Starts a ``HeadraceDataLoader`` with 2 workers over a source whose reads
from step 2 on hang, and takes step 0. Worker 0 then hangs reading steps 2
and 4 (only its lifeline can end it); worker 1 has made its ring and waits
for this process to map it (its name is still in ``/dev/shm``). Prints
``{"pids": [...], "segments": [...]}`` once both are so, and waits.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from _adapter_data import BATCH, Faulty


def main(root: Path) -> None:
    # Imported here, not at the top: workers import this script, and need no torch.
    from headrace.torch import HeadraceDataLoader, TorchDataset

    ds = TorchDataset(Faulty(root, at=2, how="hang"), batch_size=BATCH, seed=5)
    # forkserver named: the default also preloads torch into the server (1.5 s here).
    dl = HeadraceDataLoader(ds, num_workers=2, multiprocessing_context="forkserver")
    it = iter(dl)
    next(it)
    workers = dl._workers
    assert workers is not None
    pids = [p.pid for p in workers._procs]
    deadline = time.monotonic() + 30
    segments: list[str] = []
    while not segments and time.monotonic() < deadline:
        segments = [n for n in os.listdir("/dev/shm") if n.startswith(f"headrace_{pids[1]}_")]
        time.sleep(0.01)
    print(json.dumps({"pids": pids, "segments": segments}), flush=True)
    time.sleep(600)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
