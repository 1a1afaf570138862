"""A masked field (a transform's ``np.ma.MaskedArray``) is refused by name on its way to
torch, as ``pack`` refuses it: ``torch.from_numpy`` took its data and dropped its mask, with
workers (the ring carries the mask to the main process) or without, so masked items
reached the model as real ones."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is an optional extra (pip install torch)")

from _adapter_data import BATCH, token_source  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from headrace import torch as ht  # noqa: E402
from headrace._pack import pack  # noqa: E402
from headrace.errors import DataError  # noqa: E402

pytestmark = [
    pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning"),
    pytest.mark.filterwarnings("ignore:os.fork\\(\\) was called:RuntimeWarning"),
]

REFUSED = (
    r"field 'm' is a masked array: .*not its mask; pass them as two fields "
    r"\(np\.ma\.getdata\(m\) and np\.ma\.getmaskarray\(m\)\), or fill the masked items "
    r"\(m\.filled\(value\)\)"
)


def masked(arrays: dict[str, Any], samples: Any) -> dict[str, Any]:
    """``x`` as a masked field ``m``, its tokens below 500 masked (module level: workers
    import it by name)."""
    return {**arrays, "m": np.ma.masked_less(arrays["x"], 500)}


def dataset(root: Path, **kw: Any) -> ht.TorchDataset:
    return ht.TorchDataset(token_source(root), batch_size=BATCH, steps=2, transform=masked, **kw)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_masked_field_is_refused_by_name_not_stripped_of_its_mask(
    root: Path, workers: int
) -> None:
    with (
        ht.HeadraceDataLoader(dataset(root), num_workers=workers) as dl,
        pytest.raises(DataError, match=REFUSED),
    ):
        next(iter(dl))


@pytest.mark.parametrize("kw", [{"contiguous": True}, {"ragged": ("m",)}])
def test_a_masked_field_is_refused_in_every_layout(root: Path, kw: dict[str, Any]) -> None:
    # contiguous: each field copied apart; ragged=: the field as one tensor per sample.
    for workers in (0, 2):
        with (
            ht.HeadraceDataLoader(dataset(root, **kw), num_workers=workers) as dl,
            pytest.raises(DataError, match=REFUSED),
        ):
            next(iter(dl))


def test_a_stock_dataloaders_worker_refuses_it_too(root: Path) -> None:
    dl = DataLoader(dataset(root), batch_size=None, num_workers=2)
    with pytest.raises(DataError, match=REFUSED):
        next(iter(dl))


def test_to_tensors_and_pack_say_the_same() -> None:
    m = np.ma.MaskedArray(np.arange(4, dtype=np.int64), mask=[0, 1, 0, 0])
    for kw in ({}, {"share": True}, {"contiguous": True}):
        with pytest.raises(DataError, match=REFUSED):
            ht.to_tensors({"x": np.arange(4), "m": m}, **kw)
    with pytest.raises(DataError, match=REFUSED):
        pack({"m": m})
    # No item masked (np.ma.nomask) is refused all the same: a mask the next batch may
    # set, and torch drops either way.
    with pytest.raises(DataError, match=REFUSED):
        ht.to_tensors({"m": np.ma.MaskedArray(np.arange(3))})


def test_its_two_fields_as_the_message_says_become_tensors() -> None:
    m = masked({"x": np.arange(490, 510, dtype=np.uint32).reshape(2, 10)}, None)["m"]
    got = ht.to_tensors({"m": np.ma.getdata(m), "m_mask": np.ma.getmaskarray(m)})
    assert got["m"].tolist() == m.data.tolist()
    assert got["m_mask"].tolist() == (m.data < 500).tolist()


def masked_samples(arrays: dict[str, Any], samples: Any) -> dict[str, Any]:
    """``m``: one masked array per sample, of two lengths (a ragged field)."""
    out = np.empty(len(arrays["x"]), dtype=object)
    for i, row in enumerate(arrays["x"]):
        out[i] = np.ma.masked_less(row[: 3 + i % 2], 500)
    return {**arrays, "m": out}


def test_masked_samples_of_a_ragged_field_are_refused_by_sample() -> None:
    # One tensor per sample: from_numpy dropped each sample's mask.
    from headrace.torch._ragged import ragged_tensors

    batch = masked_samples({"x": np.arange(2000, dtype=np.int64).reshape(4, 500)}, None)
    with pytest.raises(DataError, match=r"field 'm\[0\]' is a masked array"):
        ragged_tensors(batch, ("m",), contiguous=False, pin_memory=False)
