"""The DataLoader checks read callers' frames: a frame read on Python before 3.13 keeps a
copy of its locals until it returns or is read again, so a training function's locals
(the last step's output, rebound at every step) stayed alive an epoch more. Only torch's
own frames are read now, where the DataLoader and its fetcher are."""

from __future__ import annotations

import copy
import gc
import pickle
import weakref
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="torch is an optional extra (pip install torch)")

from _adapter_data import BATCH, token_source  # noqa: E402

from headrace import torch as ht  # noqa: E402


def test_iterating_the_dataset_itself_again_keeps_none_of_the_callers_locals(root: Path) -> None:
    # The auto-collation check read the frame of the caller of iter(ds): the loop of
    # epoch 0's last output stayed alive through epoch 1.
    ds = ht.TorchDataset(token_source(root), batch_size=BATCH, seed=1, steps=6, prefetch=0)
    out = torch.zeros(1)
    last: weakref.ref[Any] | None = None
    for epoch in range(2):
        for batch in ds:
            out = batch["x"].clone()  # a step's output, rebound at every step
            if epoch == 0:
                last = weakref.ref(out)
            break
    gc.collect()
    assert last is not None and last() is None


@pytest.mark.parametrize("how", ["pickle", "deepcopy"])
def test_pickling_the_dataset_keeps_none_of_the_callers_locals(root: Path, how: str) -> None:
    # As a stock DataLoader's spawn or forkserver workers pickle it, at every epoch's
    # iter(): the order check read up to 24 callers' frames, the training loop's among them.
    ds = ht.TorchDataset(token_source(root), batch_size=BATCH, seed=1, steps=6)
    out = torch.zeros(3)
    last = weakref.ref(out)
    if how == "pickle":
        pickle.loads(pickle.dumps(ds))
    else:
        copy.deepcopy(ds)
    out = torch.zeros(1)  # rebound, as the next step's output
    gc.collect()
    assert last() is None and out.shape == (1,)
