"""torch's ChainDataset of TorchDatasets (one source's run, then another's) under a
DataLoader that batches, or hands batches out of order: refused as the dataset alone is,
not batched again (or reordered) silently."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch is an optional extra (pip install torch)")

from _adapter_data import BATCH, token_source  # noqa: E402
from torch.utils.data import ChainDataset, DataLoader  # noqa: E402

from headrace import torch as ht  # noqa: E402
from headrace.errors import ConfigError  # noqa: E402


def chain(root: Path) -> ChainDataset:
    return ChainDataset(
        [ht.TorchDataset(token_source(root), batch_size=BATCH, seed=s, steps=2) for s in (5, 6)]
    )


@pytest.mark.parametrize("batch_size", [1, 2])
def test_a_chain_of_datasets_batched_again_is_refused(root: Path, batch_size: int) -> None:
    # The check looked for a fetcher holding the TorchDataset itself; over a ChainDataset
    # every tensor came out with a leading dimension of 1 (the default batch_size), or
    # two whole batches stacked, without a word.
    with pytest.raises(ConfigError, match=r"gives whole batches, but the DataLoader"):
        next(iter(DataLoader(chain(root), batch_size=batch_size)))


def test_a_chain_of_datasets_without_batching_reads_each_in_turn(root: Path) -> None:
    datasets = chain(root).datasets
    want = [b["x"] for d in datasets for b in DataLoader(d, batch_size=None)]
    got = [b["x"] for b in DataLoader(chain(root), batch_size=None)]
    assert len(got) == 4 and all(torch.equal(g, w) for g, w in zip(got, want, strict=True))
    assert got[0].shape == (BATCH, 16)


def test_a_chain_of_datasets_out_of_order_is_refused(root: Path) -> None:
    # As the dataset alone is: in_order=False hands out whichever worker's batch is
    # ready first. Refused as the first worker's copy is pickled (spawn): none starts.
    loader = DataLoader(
        chain(root), batch_size=None, num_workers=2, in_order=False, multiprocessing_context="spawn"
    )
    with pytest.raises(ConfigError, match=r"this one has in_order=False"):
        next(iter(loader))
