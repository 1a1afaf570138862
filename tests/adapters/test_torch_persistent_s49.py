"""A stock DataLoader's (and torchdata's) persistent workers over a TorchDataset start each
iteration where new workers would: at a state loaded into the dataset between epochs.

They went on from where the main process's dataset stood when they started: a
``ds.load_state_dict(ds.state_at(step))`` between epochs (the documented resume for a
stock DataLoader with workers) was ignored, and the run read its first steps again.
Real worker processes (2 a loader) over real token files; batches compared by digest
with those of a new DataLoader over a dataset resumed from the same state.
"""

from __future__ import annotations

import copy
import pickle
from itertools import islice
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="torch is an optional extra (pip install torch)")

from _adapter_data import BATCH, token_source  # noqa: E402
from torch.utils.data import ChainDataset, DataLoader  # noqa: E402

from headrace import torch as ht  # noqa: E402
from headrace.testing import batch_digest  # noqa: E402

STEPS = 12

pytestmark = [
    pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning"),
    pytest.mark.filterwarnings("ignore:os.fork\\(\\) was called:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning"),
    # Iterations begun again at the same step on purpose (test_journey_torch_s50.py).
    pytest.mark.filterwarnings("ignore:TorchDataset. this DataLoader iteration:RuntimeWarning"),
]


def dataset(root: Path, **kw: Any) -> ht.TorchDataset:
    opts: dict[str, Any] = {"batch_size": BATCH, "seed": 5, "steps": STEPS}
    opts.update(kw)
    return ht.TorchDataset(token_source(root), **opts)


def digests(batches: Any, n: int | None = None) -> list[str]:
    return [batch_digest([{k: v.numpy() for k, v in b.items()}]) for b in islice(batches, n)]


def fresh(root: Path, state: dict[str, Any]) -> list[str]:
    """The batches of new workers over a dataset resumed from ``state``."""
    ds = dataset(root)
    ds.load_state_dict(state)
    return digests(DataLoader(ds, batch_size=None, num_workers=2))


@pytest.fixture(scope="module")
def start(root: Path) -> list[str]:
    """Every step from 0 (without workers: the same batches, tests/adapters/test_torch.py)."""
    return digests(iter(dataset(root)))


@pytest.mark.parametrize("context", [None, "forkserver"])
def test_a_state_loaded_between_epochs_reaches_persistent_workers(
    root: Path, start: list[str], context: str | None
) -> None:
    ds = dataset(root)
    dl = DataLoader(
        ds, batch_size=None, num_workers=2, persistent_workers=True, multiprocessing_context=context
    )
    assert digests(dl, 3) == start[:3]  # broken off: the workers stay, read ahead
    at7 = ds.state_at(7)
    ds.load_state_dict(at7)
    assert digests(dl) == start[7:]  # they went on from step 0
    assert digests(dl) == start[7:]  # where the dataset stands, as new workers
    # Another seed (the whole position goes over) and a state saved with another
    # global batch size (its origin too).
    other = dataset(root, seed=9).state_at(4)
    ds.load_state_dict(other)
    assert digests(dl) == fresh(root, other)
    ramp = dataset(root, batch_size=BATCH // 2).state_at(5)
    ds.load_state_dict(ramp)
    assert ds.origin is not None
    assert digests(dl) == fresh(root, ramp)


def test_a_state_loaded_after_iter_waits_for_the_next_epoch_in_every_worker(
    root: Path, start: list[str]
) -> None:
    # The first iteration of workers is the dataset as it was at iter(): a state loaded
    # after it reaches every worker at the next iteration, not some of them now
    # (batches of two starts interleaved).
    ds = dataset(root)
    dl = DataLoader(ds, batch_size=None, num_workers=2, persistent_workers=True)
    it = iter(dl)
    ds.load_state_dict(ds.state_at(6))
    assert digests(it) == start
    assert digests(dl) == start[6:]


def test_an_iteration_of_the_dataset_in_the_main_process_moves_persistent_workers(
    root: Path, start: list[str]
) -> None:
    ds = dataset(root)
    dl = DataLoader(ds, batch_size=None, num_workers=2, persistent_workers=True)
    assert digests(dl, 2) == start[:2]
    assert digests(iter(ds), 4) == start[:4]  # from the dataset's step (0): to step 4
    assert digests(dl) == start[4:]  # as new workers: where the main process stopped
    with ht.HeadraceDataLoader(ds) as hdl:
        assert digests(hdl, 3) == start[4:7]
    assert digests(dl) == start[7:]


def test_a_headrace_dataloader_with_workers_moves_persistent_workers_to_its_step(
    root: Path, start: list[str]
) -> None:
    ds = dataset(root)
    dl = DataLoader(ds, batch_size=None, num_workers=2, persistent_workers=True)
    assert digests(dl, 2) == start[:2]
    with ht.HeadraceDataLoader(ds, num_workers=2) as hdl:
        assert digests(hdl, 5) == start[:5]  # its consumer's step, counted here
    assert digests(dl) == start[5:]


def test_a_copy_of_the_dataset_has_workers_of_its_own(root: Path, start: list[str]) -> None:
    ds = dataset(root)
    dl = DataLoader(ds, batch_size=None, num_workers=2, persistent_workers=True)
    assert digests(dl, 1) == start[:1]
    for other in (copy.copy(ds), copy.deepcopy(ds), pickle.loads(pickle.dumps(ds))):
        other.load_state_dict(other.state_at(9))
        assert digests(iter(other)) == start[9:]
    assert digests(dl) == start  # the copies' states moved none of these workers


@pytest.mark.parametrize("prefetch_factor", [1, 4])
def test_stateful_dataloader_persistent_workers_take_a_state_loaded_into_the_dataset(
    root: Path, start: list[str], prefetch_factor: int
) -> None:
    sdl = pytest.importorskip("torchdata.stateful_dataloader", reason="torchdata not installed")

    def stateful(ds: ht.TorchDataset, persistent: bool) -> Any:
        return sdl.StatefulDataLoader(
            ds,
            batch_size=None,
            num_workers=2,
            persistent_workers=persistent,
            prefetch_factor=prefetch_factor,
        )

    ds = dataset(root)
    dl = stateful(ds, persistent=True)
    assert digests(dl, 3) == start[:3]
    ds.load_state_dict(ds.state_at(7))
    it = iter(dl)
    assert digests(it, 2) == start[7:9]  # new workers' (torchdata's new epoch)
    saved = dl.state_dict()
    assert digests(it) == start[9:]
    # torchdata's own state, taken inside that epoch, resumes at step 9 in persistent
    # workers and in new ones.
    dl.load_state_dict(saved)
    assert digests(dl) == start[9:]
    again = stateful(dataset(root), persistent=False)
    again.load_state_dict(saved)
    assert digests(again) == start[9:]


def test_spawned_persistent_workers_of_a_chain_of_datasets_take_each_ones_state(
    root: Path, start: list[str]
) -> None:
    # Each dataset's position is shared with spawned workers through one descriptor of
    # the heap it lies in; two datasets of one heap in one pickle gave it twice, and
    # spawn refused it (ValueError: bad value(s) in fds_to_keep).
    a, b = dataset(root, steps=4), dataset(root, steps=4)
    dl = DataLoader(
        ChainDataset([a, b]),
        batch_size=None,
        num_workers=2,
        persistent_workers=True,
        multiprocessing_context="spawn",
    )
    assert digests(dl) == start[:4] * 2
    a.load_state_dict(a.state_at(3))
    b.load_state_dict(b.state_at(1))
    a2, b2 = dataset(root, steps=4), dataset(root, steps=4)
    a2.load_state_dict(a.state_at(3))
    b2.load_state_dict(b.state_at(1))
    new = digests(DataLoader(ChainDataset([a2, b2]), batch_size=None, num_workers=2))
    assert sorted(new) == sorted(start[3:4] + start[1:4])  # (the chain's own order)
    assert digests(dl) == new
