"""A torch run restored onto a token file that changed since its checkpoint: the refusal
names the file, its size then and now, and the step to go on from, through the loaders
that restore a state (HeadraceDataLoader, torchdata's StatefulDataLoader)."""

from __future__ import annotations

from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is an optional extra (pip install torch)")

from _adapter_data import BATCH, token_source, write_tokens  # noqa: E402

from headrace import torch as ht  # noqa: E402
from headrace.errors import ConfigError, StateError  # noqa: E402

NAMED = r"b\.bin: 31,108 bytes when the state was saved, 32,108 bytes now"


def _grow(root: Path) -> None:
    with open(root / "b.bin", "ab") as f:
        f.write(np.zeros(250, dtype=np.uint32).tobytes())


def _dataset(root: Path) -> ht.TorchDataset:
    return ht.TorchDataset(token_source(root), batch_size=BATCH, seed=5, steps=12)


def test_headrace_dataloader_names_the_grown_file(tmp_path: Path) -> None:
    root = write_tokens(tmp_path)
    with ht.HeadraceDataLoader(_dataset(root)) as dl:
        for _ in islice(dl, 3):
            pass
        state = dl.state_dict()
    _grow(root)
    with pytest.raises(StateError, match=NAMED + r".*'step' set to 3"):
        ht.HeadraceDataLoader(_dataset(root)).load_state_dict(state)


@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")
def test_stateful_dataloader_names_the_grown_file(tmp_path: Path) -> None:
    # (0 workers: with workers torch raises the same message from the worker that loads
    # the state, and a failed iter() leaves them to a 5 s join each.)
    sdl = pytest.importorskip("torchdata.stateful_dataloader")
    root = write_tokens(tmp_path)
    dl: Any = sdl.StatefulDataLoader(_dataset(root), batch_size=None)
    for _ in islice(dl, 3):
        pass
    state = dl.state_dict()
    _grow(root)
    resumed: Any = sdl.StatefulDataLoader(_dataset(root), batch_size=None)
    with pytest.raises(StateError, match=NAMED + r".*'step' set to 3"):
        resumed.load_state_dict(state)
        next(iter(resumed))


def _digests(loader: Any) -> list[bytes]:
    return [b["x"].numpy().tobytes() + b["y"].numpy().tobytes() for b in loader]


def test_accelerate_skip_first_batches_without_a_loaded_state_is_the_resume(
    tmp_path: Path,
) -> None:
    # No headrace state loaded: the dataset starts at step 0, and skip_first_batches'
    # read-and-drop is the (slow but exact) resume; refused only over a loaded state.
    pytest.importorskip("accelerate", reason="pip install accelerate (in the test extra)")
    from accelerate import Accelerator
    from torch.utils.data import DataLoader

    root = write_tokens(tmp_path)
    want = _digests(DataLoader(_dataset(root), batch_size=None))
    acc = Accelerator(cpu=True)
    skipped = acc.skip_first_batches(DataLoader(_dataset(root), batch_size=None), 2)
    assert _digests(skipped) == want[2:]
    loaded = _dataset(root)
    loaded.load_state_dict(loaded.state_at(2))
    with pytest.raises(ConfigError, match="skip_first_batches would read and drop the first 2"):
        next(iter(acc.skip_first_batches(DataLoader(loaded, batch_size=None), 2)))


def test_accelerate_wrappers_are_known_by_class_not_name(tmp_path: Path) -> None:
    # A user's subclass of accelerate's SkipDataLoader skips as accelerate's does: refused
    # over a loaded state (it was not: only the type's own module was looked at). A
    # user's own class of the same name, a DataLoader that skips nothing, is not
    # accelerate's: not refused (torch's frames that iterate it are looked into).
    pytest.importorskip("accelerate", reason="pip install accelerate (in the test extra)")
    from accelerate.data_loader import SkipDataLoader as AccelerateSkip
    from torch.utils.data import DataLoader

    class Skipping(AccelerateSkip):  # type: ignore[misc]
        pass

    class SkipDataLoader(DataLoader[Any]):
        skip_batches = 2

    root = write_tokens(tmp_path)
    want = _digests(DataLoader(_dataset(root), batch_size=None))
    loaded = _dataset(root)
    loaded.load_state_dict(loaded.state_at(2))
    with pytest.raises(ConfigError, match="skip_first_batches would read and drop the first 2"):
        next(iter(Skipping(loaded, skip_batches=2, batch_size=None)))
    assert _digests(SkipDataLoader(loaded, batch_size=None)) == want[2:]
