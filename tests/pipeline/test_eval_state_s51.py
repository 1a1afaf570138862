"""States and exact passes (``epochs=``), as a user checkpoints them, on a real token file
of 101 samples in file order (``shuffle=False``, as a validation set is read).

A training loader's state (no ``epochs=``) over the same file loaded into the evaluation
loader was accepted: the pass began at the training run's step and counted 41 of the 101
samples, without a word. A state names its pass now, and each kind of loader refuses the
other's. And a state saved once a loop has left a pass part way (Lightning's 2-batch
sanity check, ``limit_val_batches``, a ``break``) named the step it broke at, where the
next iteration in the same process starts the pass over: a checkpoint saved then resumed
the first evaluation after it at that step, leaving out the samples before it. It names
step 0 now; a state saved while the loop is under way (preempted mid-pass) still resumes
the pass at its step, on other host counts and worker counts too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headrace.errors import StateError
from headrace.formats import TokenSource
from headrace.pipeline import Loader

B = 12
L = 8
N = 101  # samples of the file: not a multiple of B or of B x hosts
STEPS = -(-N // B)  # 9: the pass


@pytest.fixture
def val(tmp_path: Path) -> Path:
    path = tmp_path / "val.bin"
    np.arange(N * L + 1, dtype=np.uint16).tofile(path)  # windows of L, targets shifted by 1
    return path


def source(path: Path) -> TokenSource:
    src = TokenSource(str(path), context=L, shuffle=False)
    assert src.samples_per_epoch == N
    return src


def samples(batches: Any) -> list[int]:
    """The valid rows' sample numbers, checked against the file's own tokens."""
    seen: list[int] = []
    for b in batches:
        x, ok = np.asarray(b["x"]), np.asarray(b["valid"], dtype=bool)
        got = np.asarray(b["sample"])[ok]
        assert np.array_equal(x[ok][:, 0], got * L)  # sample s starts at token s * L
        seen += got.tolist()
    return seen


def test_a_training_state_is_refused_by_an_evaluation_pass(val: Path) -> None:
    """The defect: 41 of 101 rows counted, from step 5 of the training run on."""
    with Loader(source(val), batch_size=B, steps=1000) as train:
        for _, _ in zip(range(5), train, strict=False):
            pass
        state = train.state_dict()
    assert state["step"] == 5 and "epochs" not in state  # a training state, as before
    with Loader(source(val), batch_size=B, epochs=1) as ev:
        with pytest.raises(StateError, match=r"training run's .*step 5.*epochs=1") as err:
            ev.load_state_dict(state)
        assert "needs no state" in str(err.value)
        assert sorted(samples(ev)) == list(range(N))  # refused: the pass is left whole
    with Loader(source(val), batch_size=B, steps=1000) as train:
        train.load_state_dict(state)  # where it belongs
        assert train.step == 5


def test_an_evaluation_state_is_refused_by_a_training_loader(val: Path) -> None:
    with Loader(source(val), batch_size=B, epochs=1) as ev:
        it = iter(ev)
        next(it)
        next(it)
        state = ev.state_dict()
    assert state["step"] == 2 and state["epochs"] == 1
    with Loader(source(val), batch_size=B, steps=1000) as train:
        with pytest.raises(
            StateError, match=r"exact pass's \(epochs=1, .*Loader\(\.\.\., epochs=1\)"
        ):
            train.load_state_dict(state)
    with Loader(source(val), batch_size=B, epochs=2) as two:
        with pytest.raises(StateError, match=r"epochs=1.*epochs=2"):
            two.load_state_dict(state)


@pytest.mark.parametrize("world", [1, 2, 3])
def test_a_pass_saved_mid_loop_resumes_on_any_host_count(val: Path, world: int) -> None:
    with Loader(source(val), batch_size=B, epochs=1) as ev:
        first: list[int] = []
        for i, b in enumerate(ev):
            first += samples([b])
            if i == 2:
                state = ev.state_dict()  # preempted here, inside the loop
                break
    assert state["step"] == 3
    rest: list[int] = []
    for rank in range(world):
        with Loader(source(val), batch_size=B, epochs=1, rank=rank, world_size=world) as lo:
            lo.load_state_dict(state)
            rest += samples(lo)
    assert sorted(first + rest) == list(range(N))


def test_a_state_saved_after_a_loop_left_the_pass_names_step_0(val: Path) -> None:
    """A sanity check of 2 batches, then a checkpoint, then a resume in a new process."""
    with Loader(source(val), batch_size=B, epochs=1) as ev:
        for i, _ in enumerate(ev):
            if i == 1:
                break
        state = ev.state_dict()
        assert state["step"] == 0  # what the next iteration here does
        with Loader(source(val), batch_size=B, epochs=1) as resumed:
            resumed.load_state_dict(state)
            assert len(resumed) == STEPS
            assert sorted(samples(resumed)) == list(range(N))
        assert sorted(samples(ev)) == list(range(N))


def _torch() -> Any:
    return pytest.importorskip("torch", reason="torch is an optional extra (pip install torch)")


@pytest.mark.parametrize("workers", [0, 2])
def test_headrace_dataloader_left_part_way_saves_step_0(val: Path, workers: int) -> None:
    _torch()
    from headrace.torch import HeadraceDataLoader, TorchDataset

    ds = TorchDataset(source(val), batch_size=B, epochs=1)
    with HeadraceDataLoader(ds, num_workers=workers) as dl:
        for i, _ in enumerate(dl):
            if i == 1:
                break
        state = dl.state_dict()
        assert state["step"] == 0 and state["epochs"] == 1
        assert ds.state_dict()["step"] == 0 if not workers else True
        # Saved inside the loop (preempted mid-pass): it resumes there, on 2 hosts and
        # with another worker count.
        first: list[int] = []
        for i, b in enumerate(dl):
            first += samples([{k: v.numpy() for k, v in b.items()}])
            if i == 2:
                state = dl.state_dict()
                break
    assert state["step"] == 3
    rest: list[int] = []
    for rank in range(2):
        other = TorchDataset(source(val), batch_size=B, epochs=1, rank=rank, world_size=2)
        with HeadraceDataLoader(other, num_workers=2 - workers) as dl:
            dl.load_state_dict(state)
            rest += samples([{k: v.numpy() for k, v in b.items()} for b in dl])
    assert sorted(first + rest) == list(range(N))


def test_torch_dataset_left_part_way_saves_step_0(val: Path) -> None:
    torch = _torch()
    from headrace.torch import TorchDataset

    ds = TorchDataset(source(val), batch_size=B, epochs=1)
    for i, _ in enumerate(torch.utils.data.DataLoader(ds, batch_size=None)):
        if i == 1:
            break
    state = ds.state_dict()
    assert state["step"] == 0 and state["phase"] == 0
    fresh = TorchDataset(source(val), batch_size=B, epochs=1)
    fresh.load_state_dict(state)
    got = [{k: v.numpy() for k, v in b.items()} for b in fresh]
    assert sorted(samples(got)) == list(range(N))
    # Mid-loop, the state names the step reached.
    for i, _ in enumerate(ds):
        if i == 2:
            assert ds.state_dict()["step"] == 3
            break
    # A training dataset's state is refused by the pass, and the other way round.
    train = TorchDataset(source(val), batch_size=B, steps=50)
    with pytest.raises(StateError, match="training run's"):
        fresh.load_state_dict(train.state_dict())
    with pytest.raises(StateError, match="exact pass's"):
        train.load_state_dict(state)
