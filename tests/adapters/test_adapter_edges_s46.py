"""Adapter edges a user meets: an explicit start method, a stale iterator of a dataset
iterated by hand, a sequence axis split more ways than the row probe assumed."""

from __future__ import annotations

import multiprocessing as mp
from multiprocessing import forkserver
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="torch is an optional extra (pip install torch)")

from _adapter_data import BATCH, token_source  # noqa: E402

from headrace import torch as ht  # noqa: E402
from headrace.errors import ConfigError, StateError  # noqa: E402
from headrace.torch._fork_server import PRELOAD  # noqa: E402


def dataset(root: Path) -> ht.TorchDataset:
    return ht.TorchDataset(token_source(root), batch_size=BATCH, seed=5, steps=8)


@pytest.mark.parametrize("given", ["forkserver", "context"])
def test_forkserver_given_by_name_or_context_preloads_as_the_default_does(
    root: Path, monkeypatch: pytest.MonkeyPatch, given: str
) -> None:
    # The docs call forkserver the default, whose server imports torch and headrace's
    # readers once; given explicitly it started with __main__ alone, and every worker
    # imported torch itself at every iter() (first batch 4.0-9.9 s against 2.0-2.7 s).
    # A preload of the user's own is kept beside headrace's.
    server = forkserver._forkserver
    monkeypatch.setattr(server, "_preload_modules", ["__main__", "mine"])
    monkeypatch.setattr(forkserver, "ensure_running", lambda: None)  # no server started here
    ctx: Any = "forkserver" if given == "forkserver" else mp.get_context("forkserver")
    ht.HeadraceDataLoader(dataset(root), num_workers=1, multiprocessing_context=ctx)
    assert server._preload_modules == ["__main__", "mine", *PRELOAD[1:]]


def test_spawn_leaves_the_fork_server_alone(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server = forkserver._forkserver
    monkeypatch.setattr(server, "_preload_modules", ["__main__"])
    monkeypatch.setattr(forkserver, "ensure_running", lambda: None)
    ht.HeadraceDataLoader(dataset(root), num_workers=1, multiprocessing_context="spawn")
    assert server._preload_modules == ["__main__"]


@pytest.mark.parametrize("how", ["iter", "load"])
def test_a_stale_dataset_iterator_says_to_iterate_the_dataset_again(root: Path, how: str) -> None:
    # It gave the inner Loader's words: "the loader is closed: make a new one", while
    # the dataset is not closed and iterating it again goes on at its step. No
    # read-ahead: a superseded loader's read left running is closed when the stale
    # iterator is collected, and on a loaded machine that close gave up on it with a
    # RuntimeWarning, an error in the next test (CI, 2026-12-06).
    ds = ht.TorchDataset(token_source(root), batch_size=BATCH, seed=5, steps=8, prefetch=0)
    it = iter(ds)
    next(it)
    next(it)
    if how == "iter":
        again = iter(ds)
    else:
        ds.load_state_dict(ds.state_at(5))
    with pytest.raises(StateError) as exc:
        next(it)
    message = str(exc.value)
    assert "TorchDataset iterator is stale" in message
    assert "make a new one" not in message
    assert "iterate the dataset again" in message
    if how == "iter":
        assert ds.state_dict()["step"] == 2
        next(again)
        assert ds.state_dict()["step"] == 3
    else:
        assert ds.state_dict()["step"] == 5
    it.close()


def test_stock_dataloader_arguments_at_their_defaults_are_taken(root: Path) -> None:
    # A DataLoader's settings moved over as **kwargs: those that ask for nothing were
    # refused (drop_last=False), while a falsy shuffle or sampler was taken.
    stock = {
        "drop_last": False,
        "generator": None,
        "in_order": True,
        "pin_memory_device": "",
        "timeout": 0,
        "worker_init_fn": None,
        "shuffle": False,
        "sampler": None,
    }
    with ht.HeadraceDataLoader(dataset(root), **stock) as dl:
        assert len(list(dl)) == 8
    for key, value in [
        ("drop_last", True),
        ("timeout", 5.0),
        ("in_order", False),
        ("worker_init_fn", print),
        ("drop_last", 0),  # (not the bool a DataLoader's default is: a mistake)
    ]:
        with pytest.raises(ConfigError, match=rf"does not take \['{key}'\]"):
            ht.HeadraceDataLoader(dataset(root), **{key: value})


@pytest.mark.parametrize("context", ["spawn", "bogus", "fork"])
def test_a_start_method_without_workers_is_refused(root: Path, context: str) -> None:
    # As a DataLoader refuses it; "bogus" and "fork" were taken without a word.
    with pytest.raises(ConfigError, match=r"num_workers=0 starts none: leave it out"):
        ht.HeadraceDataLoader(dataset(root), multiprocessing_context=context)


def test_copy_must_be_a_bool(root: Path) -> None:
    with pytest.raises(ConfigError, match=r"copy must be True or False \(got 'yes'\)"):
        ht.HeadraceDataLoader(dataset(root), copy="yes")  # type: ignore[arg-type]
