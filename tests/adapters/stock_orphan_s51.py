"""A parent of a stock DataLoader's forkserver workers, SIGKILLed by
``test_torch_preempt_s51.py``::

    python stock_orphan_s51.py ROOT

Takes one batch from ``DataLoader(TorchDataset(...), batch_size=None, num_workers=2,
multiprocessing_context="forkserver")``, prints the workers' pids and waits.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from _adapter_data import BATCH, token_source

if __name__ == "__main__":
    from torch.utils.data import DataLoader

    from headrace.torch import TorchDataset

    ds = TorchDataset(token_source(Path(sys.argv[1])), batch_size=BATCH, seed=5)
    it = iter(DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context="forkserver"))
    next(it)
    print(json.dumps([w.pid for w in it._workers]), flush=True)  # type: ignore[attr-defined]
    time.sleep(600)
