"""The torch adapters resume with another global batch size as the Loader does: at the
first sample not read, with any worker count, through every way a state travels."""

from __future__ import annotations

import json
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is an optional extra (pip install torch)")

from _adapter_data import token_source  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from headrace import torch as ht  # noqa: E402
from headrace.errors import StateError  # noqa: E402
from headrace.pipeline import Loader  # noqa: E402
from headrace.testing import batch_digest  # noqa: E402

pytestmark = [
    pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning"),
    pytest.mark.filterwarnings("ignore:os.fork\\(\\) was called:RuntimeWarning"),
]

B1, K, B2, END = 8, 5, 16, 10  # batch 8 for steps 0..4, then 16 for steps 5..9


@pytest.fixture(scope="module")
def saved(root: Path) -> dict[str, Any]:
    """The state after K steps of batch B1, as HeadraceDataLoader saves it."""
    dl = ht.HeadraceDataLoader(ht.TorchDataset(token_source(root), batch_size=B1, seed=5))
    list(islice(dl, K))
    state = dl.state_dict()
    dl.close()
    return state


@pytest.fixture(scope="module")
def expected(root: Path) -> list[str]:
    """Steps K..END-1 of batch B2: the source's samples K*B1, K*B1 + 1, ... in batches."""
    src = token_source(root)
    whole = src.read(5, np.arange(K * B1, K * B1 + (END - K) * B2, dtype=np.int64))
    src.close()
    return [
        batch_digest([{k: a[i * B2 : (i + 1) * B2] for k, a in whole.items()}])
        for i in range(END - K)
    ]


def changed(root: Path, saved: dict[str, Any]) -> ht.TorchDataset:
    ds = ht.TorchDataset(token_source(root), batch_size=B2, seed=5, steps=END)
    ds.load_state_dict(saved)
    return ds


def digests(batches: Any, n: int | None = None) -> list[str]:
    return [batch_digest([{k: v.numpy() for k, v in b.items()}]) for b in islice(batches, n)]


@pytest.mark.parametrize("workers", [0, 2])
def test_a_stock_dataloader_after_the_change_reads_on(
    root: Path, saved: dict[str, Any], expected: list[str], workers: int
) -> None:
    ds = changed(root, saved)
    assert ds.state_at(K)["origin"] == {"step": K, "sample": K * B1}
    assert digests(DataLoader(ds, batch_size=None, num_workers=workers)) == expected


def test_headrace_dataloader_workers_and_dcp_after_the_change(
    root: Path, saved: dict[str, Any], expected: list[str]
) -> None:
    dl = ht.HeadraceDataLoader(changed(root, saved), num_workers=2)
    first = digests(dl, 2)
    state = ht.DCPStateful(dl).state_dict()  # a JSON string, as DCP keeps it
    dl.close()
    assert json.loads(state["headrace"])["origin"] == {"step": K, "sample": K * B1}
    again = ht.HeadraceDataLoader(ht.TorchDataset(token_source(root), batch_size=B2, steps=END))
    ht.DCPStateful(again).load_state_dict(state)
    assert first + digests(again) == expected
    again.close()


@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")
def test_stateful_dataloader_after_the_change(
    root: Path, saved: dict[str, Any], expected: list[str]
) -> None:
    sdl = pytest.importorskip("torchdata.stateful_dataloader", reason="torchdata not installed")
    dl = sdl.StatefulDataLoader(changed(root, saved), batch_size=None, num_workers=2)
    it = iter(dl)
    first = digests(it, 3)
    state = dl.state_dict()  # each worker's dataset state: origin included
    del it
    ds = ht.TorchDataset(token_source(root), batch_size=B2, seed=5, steps=END)
    dl2 = sdl.StatefulDataLoader(ds, batch_size=None, num_workers=2)
    dl2.load_state_dict(state)
    assert first + digests(dl2) == expected


def test_the_loader_and_the_dataset_agree_and_an_exact_pass_refuses(
    root: Path, saved: dict[str, Any], expected: list[str]
) -> None:
    with Loader(token_source(root), batch_size=B2, seed=5, steps=END) as ld:
        ld.load_state_dict(saved)
        assert [batch_digest([b]) for b in ld] == expected
    ds = ht.TorchDataset(token_source(root), batch_size=B2, seed=5, epochs=1)
    with pytest.raises(StateError, match=r"training run's .*exact pass \(epochs=1\)"):
        ds.load_state_dict(saved)  # a training run's state, whatever its batch size
