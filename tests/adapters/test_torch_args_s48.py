"""What a user moving from a stock DataLoader passes: a start method of a type that is
none (to HeadraceDataLoader), a lambda transform under a stock DataLoader's spawn or
forkserver workers."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch is an optional extra (pip install torch)")

from _adapter_data import BATCH, token_source  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from headrace import torch as ht  # noqa: E402
from headrace.errors import ConfigError  # noqa: E402


def dataset(root: Path) -> ht.TorchDataset:
    return ht.TorchDataset(token_source(root), batch_size=BATCH, seed=5, steps=4)


@pytest.mark.parametrize("context", [5, object(), b"spawn"])
def test_a_start_method_of_another_type_is_refused_by_name(root: Path, context: object) -> None:
    # A bare AttributeError ("'int' object has no attribute 'get_start_method'"), naming
    # neither the argument nor what it takes (a stock DataLoader says both).
    with pytest.raises(ConfigError, match=r"multiprocessing_context=.* is no start method"):
        ht.HeadraceDataLoader(dataset(root), num_workers=1, multiprocessing_context=context)  # type: ignore[arg-type]


@pytest.mark.parametrize("context", ["spawn", "forkserver"])
def test_a_transform_a_stock_dataloaders_workers_cannot_take_is_named(
    root: Path, context: str
) -> None:
    # A bare PicklingError ("Can't pickle <function <lambda> ...>: attribute lookup
    # <lambda> on __main__ failed") out of torch's worker start, where HeadraceDataLoader
    # names the transform and the fix. Raised as the first worker is pickled: none starts.
    ds = ht.TorchDataset(
        token_source(root), batch_size=BATCH, steps=2, transform=lambda arrays, samples: arrays
    )
    loader = DataLoader(ds, batch_size=None, num_workers=1, multiprocessing_context=context)
    with pytest.raises(ConfigError, match=r"transform <function .*<lambda>.* does not pickle") as e:
        next(iter(loader))
    assert "module-level function or class" in str(e.value)
    assert "num_workers=0" in str(e.value)
    assert len(list(DataLoader(ds, batch_size=None))) == 2  # without workers it reads
