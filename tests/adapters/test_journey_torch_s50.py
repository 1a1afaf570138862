"""A PyTorch user's journey into an existing training script: an epoch loop over a stock
DataLoader with and without workers, ``set_epoch`` as DistributedSampler users write it,
a user's ``collate_fn``, a mid-epoch state resumed with another worker count, an
interrupted loop iterated again."""

from __future__ import annotations

from itertools import islice
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="torch is an optional extra (pip install torch)")

from _adapter_data import BATCH, token_source  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from headrace import torch as ht  # noqa: E402
from headrace.testing import batch_digest  # noqa: E402

STEPS = 6

pytestmark = [
    pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning"),
    pytest.mark.filterwarnings("ignore:os.fork\\(\\) was called:RuntimeWarning"),
]


def dataset(root: Path, steps: int | None = STEPS, **kw: Any) -> ht.TorchDataset:
    return ht.TorchDataset(token_source(root), batch_size=BATCH, seed=5, steps=steps, **kw)


def digests(batches: Any, n: int | None = None) -> list[str]:
    return [batch_digest([{k: v.numpy() for k, v in b.items()}]) for b in islice(batches, n)]


# Raised in the worker (it inherits the filters at its start) and so in the main process,
# of its own type: a user without the filter sees it on stderr.
@pytest.mark.filterwarnings("error:TorchDataset. this DataLoader iteration:RuntimeWarning")
@pytest.mark.parametrize("persistent", [False, True])
def test_a_stock_dataloaders_workers_repeating_an_epoch_warn(root: Path, persistent: bool) -> None:
    # `for epoch in range(3): for batch in dl:` with steps= one epoch: without workers
    # the 2nd epoch yields nothing and warns; with workers each iteration starts again
    # where the main process's dataset stands, step 0, and the 2nd epoch gave the 1st
    # epoch's batches again, in the same order, without a word (a stock DataLoader's
    # workers cannot tell the dataset where the consumer stopped). It warns now, from
    # the worker, naming the step and what to do.
    ds = dataset(root)
    dl = DataLoader(ds, batch_size=None, num_workers=1, persistent_workers=persistent)
    first = digests(dl)
    with pytest.raises(RuntimeWarning, match=r"step 0 again.*HeadraceDataLoader.*state_at"):
        list(dl)
    # A state loaded in the main process between epochs is a deliberate start: no warning.
    for step in (2, 2):
        ds.load_state_dict(ds.state_at(step))
        assert digests(DataLoader(ds, batch_size=None, num_workers=1)) == first[step:]


@pytest.mark.filterwarnings("error:TorchDataset. this DataLoader iteration:RuntimeWarning")
def test_an_exact_pass_looped_again_by_workers_does_not_warn(root: Path) -> None:
    # An evaluation pass (epochs=1) is the same pass at every loop, by design.
    dl = DataLoader(dataset(root, steps=None, epochs=1), batch_size=None, num_workers=1)
    assert digests(dl, 2) == digests(dl, 2)


def test_set_epoch_as_distributed_sampler_users_write_it_says_what_to_do(root: Path) -> None:
    # `ds.set_epoch(e)` / `dl.set_epoch(e)` (what DistributedSampler users write, and
    # what accelerate and the HF Trainer call when it exists) was a bare AttributeError.
    # It stays an AttributeError (hasattr() is False, so trainers skip it), now naming
    # why there is none and how the epoch is had.
    ds = dataset(root)
    for obj in (ds, ht.HeadraceDataLoader(ds)):
        assert not hasattr(obj, "set_epoch")
        with pytest.raises(AttributeError, match=r"set_epoch.*\(seed, epoch\).*steps="):
            obj.set_epoch(1)  # type: ignore[union-attr]
    with pytest.raises(AttributeError, match="no_such_thing"):
        ds.no_such_thing  # type: ignore[attr-defined]  # noqa: B018


def test_a_users_collate_fn_in_a_stock_dataloader_is_honoured(root: Path) -> None:
    # batch_size=None: torch calls collate_fn on each whole batch; it is the user's to run.
    def to_long(batch: dict[str, Any]) -> dict[str, Any]:
        return {"x": batch["x"].long(), "y": batch["y"].long()}

    got = list(DataLoader(dataset(root, steps=2), batch_size=None, collate_fn=to_long))
    assert [b["x"].dtype for b in got] == [torch.int64] * 2
    ref = list(dataset(root, steps=2))
    assert all(torch.equal(g["x"], r["x"].long()) for g, r in zip(got, ref, strict=True))


def test_interrupted_loop_goes_on_at_the_next_batch(root: Path) -> None:
    ref = digests(dataset(root))
    dl = ht.HeadraceDataLoader(dataset(root))
    got = []
    with pytest.raises(KeyboardInterrupt):
        for i, batch in enumerate(dl):
            got += digests([batch])
            if i == 2:
                raise KeyboardInterrupt
    assert got + digests(dl) == ref
