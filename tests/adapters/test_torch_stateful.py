"""A torchdata StatefulDataLoader's state resumes with another worker count through
``from_stateful_dataloader``: torchdata refuses its own state there (a bare
AssertionError from 2 workers to 3), and a run that saved only that state could not
change its worker count at all."""

from __future__ import annotations

from itertools import islice
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="torch is an optional extra (pip install torch)")
sdl = pytest.importorskip("torchdata.stateful_dataloader")

from _adapter_data import BATCH, token_source  # noqa: E402

from headrace import torch as ht  # noqa: E402
from headrace.errors import StateError  # noqa: E402
from headrace.pipeline import Loader  # noqa: E402
from headrace.testing import batch_digest  # noqa: E402

STEPS, SAVE_AT = 14, 7

pytestmark = [
    pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning"),
    pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning"),
    pytest.mark.filterwarnings("ignore:os.fork\\(\\) was called:RuntimeWarning"),
]


@pytest.fixture(scope="module")
def reference(root: Path) -> list[str]:
    with Loader(token_source(root), batch_size=BATCH, seed=5, steps=STEPS) as ld:
        return [batch_digest([b]) for b in ld]


def dataset(root: Path) -> ht.TorchDataset:
    return ht.TorchDataset(token_source(root), batch_size=BATCH, seed=5, steps=STEPS)


def digests(batches: Any) -> list[str]:
    return [batch_digest([{k: v.numpy() for k, v in b.items()}]) for b in batches]


@pytest.mark.parametrize(("saved", "every"), [(2, 1), (3, 4), (0, 1)])
def test_a_stateful_dataloader_state_resumes_with_another_worker_count(
    root: Path, reference: list[str], saved: int, every: int
) -> None:
    dl: Any = sdl.StatefulDataLoader(
        dataset(root), batch_size=None, num_workers=saved, snapshot_every_n_steps=every
    )
    it = iter(dl)
    assert digests(islice(it, SAVE_AT)) == reference[:SAVE_AT]
    state = dl.state_dict()
    del it
    for workers in {0, 3} - {saved}:
        ds = dataset(root)
        ds.load_state_dict(ht.from_stateful_dataloader(state))
        resumed: Any = sdl.StatefulDataLoader(ds, batch_size=None, num_workers=workers)
        assert digests(resumed) == reference[SAVE_AT:], workers
    ds = dataset(root)
    ds.load_state_dict(ht.from_stateful_dataloader(state))
    assert digests(ht.HeadraceDataLoader(ds)) == reference[SAVE_AT:]
    # Loaded as it is (a run moving from torchdata to HeadraceDataLoader): the refusal
    # named the keys, or with 0 workers pointed at 'dataset_state', and not the converter.
    for target in (dataset(root), ht.HeadraceDataLoader(dataset(root))):
        with pytest.raises(StateError, match=r"torchdata .*\.from_stateful_dataloader\(state\)"):
            target.load_state_dict(state)


def test_what_is_not_a_stateful_dataloader_state_is_refused(root: Path) -> None:
    plain = dataset(root).state_dict()
    with pytest.raises(StateError, match=r"not a StatefulDataLoader state \(keys: \['batch_size'"):
        ht.from_stateful_dataloader(plain)
    with pytest.raises(StateError, match="holds no dataset state: was its dataset a headrace"):
        ht.from_stateful_dataloader({"dataset_state": None})
    with pytest.raises(StateError, match="expected a dict with '_worker_snapshots'"):
        ht.from_stateful_dataloader({"_snapshot": 3})

    one = dataset(root).state_dict()
    two = {**one, "seed": 6}
    workers = {f"worker_{i}": {"dataset_state": s} for i, s in enumerate((one, two))}
    with pytest.raises(StateError, match="workers hold states of different runs"):
        ht.from_stateful_dataloader({"_snapshot": {"_worker_snapshots": workers}})
    with pytest.raises(StateError, match="_steps_since_snapshot -1; expected an integer >= 0"):
        ht.from_stateful_dataloader(
            {"_snapshot": {"_worker_snapshots": workers}, "_steps_since_snapshot": -1}
        )


@pytest.mark.parametrize("exc", [KeyboardInterrupt, MemoryError])
def test_a_batch_lost_on_its_way_to_tensors_is_not_counted_as_read(
    root: Path, reference: list[str], monkeypatch: pytest.MonkeyPatch, exc: type[BaseException]
) -> None:
    # Ctrl-C (or out of memory) while step 2's tensors were made (pinned, say): the loader
    # had already counted step 2, so a state saved then resumed at step 3 and the run
    # never trained on step 2's batch (JaxLoader had the same defect: found with real SIGINTs).
    real = ht.TorchDataset._as_tensors
    calls = []

    def fails_third(self: Any, *args: Any, **kw: Any) -> Any:  # fault injection
        calls.append(1)
        if len(calls) == 3:
            raise exc
        return real(self, *args, **kw)

    monkeypatch.setattr(ht.TorchDataset, "_as_tensors", fails_third)
    ds = dataset(root)
    got = []
    with pytest.raises(exc):
        for b in ds:
            got.append(batch_digest([{k: v.numpy() for k, v in b.items()}]))
    assert len(got) == 2
    state = ds.state_dict()
    assert state["step"] == 2
    monkeypatch.setattr(ht.TorchDataset, "_as_tensors", real)
    again = dataset(root)
    again.load_state_dict(state)
    got += [batch_digest([{k: v.numpy() for k, v in b.items()}]) for b in again]
    assert got == reference


@pytest.mark.parametrize("workers", [0, 2])
def test_a_headrace_dataloader_batch_lost_on_its_way_is_not_counted(
    root: Path, reference: list[str], monkeypatch: pytest.MonkeyPatch, workers: int
) -> None:
    # The same through HeadraceDataLoader: without workers its dataset's loader counted
    # the step before the tensors were made; with workers the consumer counted it before
    # the slot became tensors (pinned, say).
    cls, name = (
        (ht.TorchDataset, "_as_tensors") if not workers else (ht.HeadraceDataLoader, "_from_slot")
    )
    real = getattr(cls, name)
    calls = []

    def fails_third(self: Any, *args: Any, **kw: Any) -> Any:  # fault injection
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(self, *args, **kw)

    monkeypatch.setattr(cls, name, fails_third)
    got = []
    with ht.HeadraceDataLoader(dataset(root), num_workers=workers) as dl:
        with pytest.raises(KeyboardInterrupt):
            for b in dl:
                got.append(batch_digest([{k: v.numpy() for k, v in b.items()}]))
        state = dl.state_dict()
    assert len(got) == 2 and state["step"] == 2
    monkeypatch.setattr(cls, name, real)
    with ht.HeadraceDataLoader(dataset(root), num_workers=workers) as dl:
        dl.load_state_dict(state)
        got += [batch_digest([{k: v.numpy() for k, v in b.items()}]) for b in dl]
    assert got == reference
