"""Corrupt files replaced in a stock ``DataLoader``'s workers are listed by the main
process's source.

A folder of real NPY files with a truncated one and an empty one, read under
``on_corrupt="replace"`` through ``DataLoader(TorchDataset(...), batch_size=None,
num_workers=2)``: the main process's ``src.corrupt_files`` stayed ``{}`` and
``replaced_samples`` 0 (each worker's copy kept its own, said only on the workers'
stderr), where a ``HeadraceDataLoader``'s workers relay theirs.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch is an optional extra (pip install torch)")

from _corrupt_npys import EMPTY, TRUNCATED, write_corrupt_npys  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from headrace.formats import FileSource  # noqa: E402
from headrace.torch import TorchDataset  # noqa: E402


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_corrupt_npys(tmp_path_factory.mktemp("corrupt_stock"))


def _run(folder: Path, workers: int) -> tuple[FileSource, list[list[int]]]:
    src = FileSource(str(folder), format="npy", on_corrupt="replace", max_corrupt=0.1)
    ds = TorchDataset(src, batch_size=8, seed=1, steps=10)
    context = "forkserver" if workers else None
    dl = DataLoader(ds, batch_size=None, num_workers=workers, multiprocessing_context=context)
    batches = list(dl)
    for b in batches:
        assert type(b) is dict  # what the user gets: the batch, nothing added
    return src, sorted(b["index"].tolist() for b in batches)


def test_stock_workers_corrupt_files_reach_main_process(
    folder: Path, caplog: pytest.LogCaptureFixture
) -> None:
    alone, alone_index = _run(folder, 0)
    bad = {str(folder / TRUNCATED), str(folder / EMPTY)}
    assert set(alone.corrupt_files) == bad  # 80 samples: both epochs read both
    assert alone.replaced_samples == 4
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="headrace"):
        src, index = _run(folder, 2)
    assert index == alone_index
    assert src.corrupt_files == alone.corrupt_files  # the same reasons, by name
    assert src.replaced_samples == alone.replaced_samples
    said = [r.getMessage() for r in caplog.records if "corrupt file" in r.getMessage()]
    assert len(said) == 2 and all(any(b in m for m in said) for b in bad)  # here, once
