"""Corrupt files replaced in a stock ``DataLoader``'s workers reach the main process's
source whatever the DataLoader's ``collate_fn`` returns (session 54).

Session 53 carried them on the batch (``Relayed``, a ``dict`` the default collate
copies with them); a ``collate_fn`` of the user's built another object from it, and
the main process's ``src.corrupt_files`` stayed ``{}`` and ``replaced_samples`` 0,
silently. Real NPY files, one truncated and one empty, read under
``on_corrupt="replace"``: the news must equal a run without workers. Where a dataset of
the user's takes the batches apart before the DataLoader sees them (the news cannot
reach the main process), the worker says so once, naming what to do.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="torch is an optional extra (pip install torch)")

from _corrupt_npys import EMPTY, TRUNCATED, write_corrupt_npys  # noqa: E402
from torch.utils.data import DataLoader, IterableDataset  # noqa: E402

from headrace.formats import FileSource  # noqa: E402
from headrace.torch import TorchDataset  # noqa: E402

# Forked DataLoader workers: JAX, imported by other tests of an xdist worker, warns at a fork.
pytestmark = pytest.mark.filterwarnings("ignore:os.fork\\(\\) was called:RuntimeWarning")


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_corrupt_npys(tmp_path_factory.mktemp("corrupt_collate"))


class Pair:
    """A custom batch type (what a user's collate_fn may return)."""

    def __init__(self, batch: dict[str, Any]) -> None:
        self.data, self.index = batch["data"], batch["index"]


def as_dict(batch: dict[str, Any]) -> dict[str, Any]:
    return {"data": batch["data"].float(), "index": batch["index"]}


def indices(out: Any) -> list[int]:
    if isinstance(out, dict):
        return list(out["index"].tolist())
    if isinstance(out, tuple):
        return list(out[1].tolist())
    if isinstance(out, list):  # [batch, its size]
        return list(out[0]["index"].tolist())
    return list(out.index.tolist())


def _source(folder: Path) -> FileSource:
    return FileSource(str(folder), format="npy", on_corrupt="replace", max_corrupt=0.1)


def _run(
    folder: Path, collate: Callable[[Any], Any] | None, workers: int, context: str | None
) -> tuple[FileSource, list[list[int]]]:
    src = _source(folder)
    ds = TorchDataset(src, batch_size=8, seed=1, steps=10)
    dl = DataLoader(
        ds,
        batch_size=None,
        num_workers=workers,
        collate_fn=collate,
        multiprocessing_context=context,
    )
    return src, sorted(indices(b) for b in dl)


@pytest.mark.parametrize(
    ("collate", "context"),
    [
        (None, "fork"),  # the default collate (default_convert): session 53's case
        (as_dict, "fork"),  # a new dict
        (operator.itemgetter("data", "index"), "forkserver"),  # a tuple; started apart
        (Pair, "fork"),  # an object of the user's class
    ],
    ids=["default", "dict", "tuple", "object"],
)
def test_custom_collate_keeps_corrupt_news(
    folder: Path, collate: Callable[[Any], Any] | None, context: str
) -> None:
    alone, alone_index = _run(folder, collate, 0, None)
    bad = {str(folder / TRUNCATED), str(folder / EMPTY)}
    assert set(alone.corrupt_files) == bad
    assert alone.replaced_samples == 4
    src, index = _run(folder, collate, 2, context)
    assert index == alone_index  # the same batches, in whatever the collate made
    assert src.corrupt_files == alone.corrupt_files  # was {}: the news collated away
    assert src.replaced_samples == alone.replaced_samples  # was 0


def test_collate_keeping_the_batch_inside_counts_once(folder: Path) -> None:
    """A collate_fn returning the batch inside its own structure: each replaced sample
    counted once, not once for the batch and again for the structure."""
    alone, _ = _run(folder, None, 0, None)
    src, _ = _run(folder, lambda b: [b, len(b)], 2, "fork")
    assert src.corrupt_files == alone.corrupt_files
    assert src.replaced_samples == alone.replaced_samples


class Pairs(IterableDataset[tuple[Any, Any]]):
    """A user's dataset over the TorchDataset that takes each batch apart."""

    def __init__(self, ds: TorchDataset) -> None:
        self.ds = ds

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        for batch in self.ds:
            yield batch["data"], batch["index"]


def test_news_lost_in_a_wrapper_dataset_is_said_once(
    folder: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """Where the news cannot reach the main process, each worker says so once (it said
    nothing, and the main process's source listed no corrupt file)."""
    src = _source(folder)
    ds = TorchDataset(src, batch_size=8, seed=1, steps=10)
    # Spawned: a forked worker keeps pytest's record of warnings, and would print none.
    dl = DataLoader(Pairs(ds), batch_size=None, num_workers=2, multiprocessing_context="spawn")
    assert len(list(dl)) == 10
    err = capfd.readouterr().err
    assert err.count("did not reach the main process") == 2, err  # once a worker
    assert "Pairs" in err and "collate_fn" in err  # names the wrapper and the fix
    assert src.corrupt_files == {}  # (as said)
