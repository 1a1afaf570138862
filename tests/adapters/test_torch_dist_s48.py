"""A dataset that took its rank from torch.distributed, iterated after the process group
is gone (destroy_process_group at the end of training, then an evaluation): it reads the
rank's slice it was made for, and says nothing of reading the whole global batch."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch is an optional extra (pip install torch)")

from _adapter_data import BATCH, token_source  # noqa: E402

from headrace import torch as ht  # noqa: E402


def test_a_dataset_made_under_a_process_group_reads_its_slice_after_it_is_gone(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # It warned "this process reads the whole global batch as host 0 of 1 ... every rank
    # would read the same rows", while it read rank 1's half, as made.
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    monkeypatch.setenv("WORLD_SIZE", "2")  # as torchrun sets them
    monkeypatch.setenv("RANK", "1")
    dist.init_process_group("fake", store=FakeStore(), rank=1, world_size=2)
    try:
        ds = ht.TorchDataset(token_source(root), batch_size=BATCH, seed=5, steps=2)
    finally:
        dist.destroy_process_group()
    assert (ds.rank, ds.world_size) == (1, 2)
    mine = ht.TorchDataset(
        token_source(root), batch_size=BATCH, seed=5, steps=2, rank=1, world_size=2
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = [b["x"] for b in ds]
    want = [b["x"] for b in mine]
    assert len(got) == 2 and got[0].shape == (BATCH // 2, 16)
    assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True))
