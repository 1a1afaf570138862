"""A stock DataLoader left at its default ``batch_size=1`` collates a list of one of the
dataset's batches: every tensor silently gained a leading dimension of 1. It is refused
with the fix named, with and without workers; ``batch_size=None``, HeadraceDataLoader and
StatefulDataLoader given ``batch_size=None`` read as before. A DataLoader of several workers
with ``in_order=False`` (which reordered the steps by the workers' timing) is refused too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="torch is an optional extra (pip install torch)")

from _adapter_data import BATCH, token_source  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from headrace import torch as ht  # noqa: E402
from headrace.errors import ConfigError  # noqa: E402
from headrace.pipeline import Loader  # noqa: E402
from headrace.testing import batch_digest  # noqa: E402

STEPS = 6

pytestmark = [
    pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning"),
    pytest.mark.filterwarnings("ignore:os.fork\\(\\) was called:RuntimeWarning"),
]


def dataset(root: Path) -> ht.TorchDataset:
    return ht.TorchDataset(token_source(root), batch_size=BATCH, seed=5, steps=STEPS)


def digests(batches: Any) -> list[str]:
    return [batch_digest([{k: v.numpy() for k, v in b.items()}]) for b in batches]


def refusal(dl: DataLoader[Any]) -> str:
    """The message of the ConfigError that the first batch raises. The workers are
    stopped here: left to the garbage collector (torch's iterator is in a reference
    cycle), torch stops them at a later collection and waits out a 5 s join a worker,
    10 s of another test's time (the same with a bare IterableDataset that raises)."""
    it = None
    try:
        it = iter(dl)  # without workers, iter() already calls the dataset's __iter__
        next(it)
    except ConfigError as exc:
        return str(exc)
    finally:
        getattr(it, "_shutdown_workers", lambda: None)()
    raise AssertionError("the first batch was not refused")


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("batch_size", [1, 2])
def test_a_stock_dataloader_that_batches_the_batches_is_refused(
    root: Path, workers: int, batch_size: int
) -> None:
    dl = DataLoader(dataset(root), batch_size=batch_size, num_workers=workers)
    assert "batch_size=None" in refusal(dl)


def test_the_default_batch_size_is_refused(root: Path) -> None:
    assert "DataLoader(dataset, batch_size=None" in refusal(DataLoader(dataset(root)))


@pytest.mark.parametrize("workers", [0, 2])
def test_batch_size_none_and_headrace_dataloader_read_every_batch_as_made(
    root: Path, workers: int
) -> None:
    want = [
        batch_digest([b]) for b in Loader(token_source(root), batch_size=BATCH, seed=5, steps=STEPS)
    ]
    stock = list(DataLoader(dataset(root), batch_size=None, num_workers=workers))
    assert stock[0]["x"].shape[0] == BATCH  # no leading dimension of 1
    assert digests(stock) == want
    assert digests(ht.HeadraceDataLoader(dataset(root), num_workers=workers)) == want


@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")
def test_stateful_dataloader_with_batch_size_none_reads_and_without_is_refused(
    root: Path,
) -> None:
    sdl = pytest.importorskip("torchdata.stateful_dataloader")
    want = [
        batch_digest([b]) for b in Loader(token_source(root), batch_size=BATCH, seed=5, steps=STEPS)
    ]
    assert digests(sdl.StatefulDataLoader(dataset(root), batch_size=None)) == want
    with pytest.raises(ConfigError, match=r"batch_size=None"):
        next(iter(sdl.StatefulDataLoader(dataset(root))))


def test_iterating_the_dataset_directly_is_not_refused(root: Path) -> None:
    assert len(list(iter(dataset(root)))) == STEPS


# in_order=False hands out whichever worker's batch is ready first: with one worker slower
# than the other the steps came out 1, 3, 5, ..., 0, 2, 4 (another order each run).
@pytest.mark.parametrize("context", ["fork", "forkserver", "spawn"])
def test_a_dataloader_out_of_order_is_refused(root: Path, context: str) -> None:
    # fork: refused in the worker (the parent's frames are there); forkserver and spawn:
    # refused in the main process, as the dataset is pickled for the first worker.
    dl = DataLoader(
        dataset(root),
        batch_size=None,
        num_workers=2,
        in_order=False,
        multiprocessing_context=context,
    )
    message = refusal(dl)
    assert "in_order=False" in message and "HeadraceDataLoader" in message


@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")
def test_a_stateful_dataloader_out_of_order_is_refused(root: Path) -> None:
    sdl = pytest.importorskip("torchdata.stateful_dataloader")
    dl = sdl.StatefulDataLoader(dataset(root), batch_size=None, num_workers=2, in_order=False)
    assert "in_order=False" in refusal(dl)


def test_out_of_order_with_one_worker_reads_in_order(root: Path) -> None:
    want = [
        batch_digest([b]) for b in Loader(token_source(root), batch_size=BATCH, seed=5, steps=STEPS)
    ]
    dl = DataLoader(dataset(root), batch_size=None, num_workers=1, in_order=False)
    assert digests(dl) == want
