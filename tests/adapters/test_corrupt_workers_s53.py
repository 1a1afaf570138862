"""Corrupt files replaced in worker processes are listed by the main process's source.

A folder of real JPEGs with a truncated one and an empty one, read under
``on_corrupt="replace"``: with ``HeadraceDataLoader(num_workers=2)`` the main process's
``src.corrupt_files`` was ``{}`` and ``replaced_samples`` 0 (each worker's copy kept its
own), and nothing was logged where the user's logging is set up. A stock ``DataLoader``'s
forked workers over such a source failed at their first read (``ReferenceError``).
"""

from __future__ import annotations

import io
import logging
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is an optional extra (pip install torch)")
Image = pytest.importorskip("PIL.Image")

# jax (imported by test_jax.py in the same pytest process) warns at every fork; the
# stock DataLoader's forked workers here never touch jax.
pytestmark = pytest.mark.filterwarnings("ignore:os.fork\\(\\) was called:RuntimeWarning")

from headrace.formats import FileSource  # noqa: E402
from headrace.torch import HeadraceDataLoader, TorchDataset  # noqa: E402

TRUNCATED = "cat/005.jpg"
EMPTY = "dog/011.jpg"


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("corrupt_workers") / "train"
    for c, cls in enumerate(("cat", "dog")):
        (root / cls).mkdir(parents=True)
        for i in range(20):
            rng = np.random.default_rng(100 * c + i)
            img = rng.integers(0, 255, (8, 8, 3), dtype=np.uint8)
            Image.fromarray(img).save(root / cls / f"{i:03d}.jpg", quality=90)
    whole = (root / TRUNCATED).read_bytes()
    (root / TRUNCATED).write_bytes(whole[: len(whole) // 2])
    (root / EMPTY).write_bytes(b"")
    # Independently: Pillow cannot load either.
    for bad in (TRUNCATED, EMPTY):
        with pytest.raises(OSError):
            Image.open(io.BytesIO((root / bad).read_bytes())).load()
    return root


def _source(folder: Path) -> FileSource:
    return FileSource(
        str(folder), format="jpeg", labels="folders", on_corrupt="replace", max_corrupt=0.1
    )


def _run(folder: Path, workers: int) -> tuple[FileSource, list[list[int]]]:
    src = _source(folder)
    ds = TorchDataset(src, batch_size=8, seed=1, steps=5)
    with HeadraceDataLoader(ds, num_workers=workers) as dl:
        index = [b["index"].tolist() for b in dl]
    return src, index


def test_workers_corrupt_files_reach_main_process(
    folder: Path, caplog: pytest.LogCaptureFixture
) -> None:
    alone, alone_index = _run(folder, 0)
    bad = {str(folder / TRUNCATED), str(folder / EMPTY)}
    assert set(alone.corrupt_files) == bad  # every epoch of 40 files reads both
    assert alone.replaced_samples == 2
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="headrace"):
        src, index = _run(folder, 2)
    assert index == alone_index
    assert src.corrupt_files == alone.corrupt_files  # the same reasons, by name
    assert "truncated JPEG" in src.corrupt_files[str(folder / TRUNCATED)]
    assert "empty file (0 bytes)" in src.corrupt_files[str(folder / EMPTY)]
    assert src.replaced_samples == alone.replaced_samples
    said = [r.getMessage() for r in caplog.records if "corrupt file" in r.getMessage()]
    assert len(said) == 2 and all(any(b in m for m in said) for b in bad)  # logged here, once


def test_max_corrupt_counts_every_workers_files(folder: Path) -> None:
    """Each worker meets one of the two (seed 0): the main process counts both against
    the limit, as it does without workers (each worker's copy allowed its one)."""
    from headrace.errors import DataError

    for workers in (0, 2):
        src = FileSource(str(folder), format="jpeg", on_corrupt="replace", max_corrupt=0.025)
        ds = TorchDataset(src, batch_size=8, seed=0, steps=5)
        with pytest.raises(DataError, match="2 of 40 files are corrupt"):
            with HeadraceDataLoader(ds, num_workers=workers) as dl:
                for _ in dl:
                    pass


def test_stock_dataloader_fork_workers_read_replaced(folder: Path) -> None:
    """A stock DataLoader's forked workers, after the main process has read the source
    (its read lock made here): the same batches as without workers."""
    ctx = torch.multiprocessing.get_context("fork")
    _, alone_index = _run(folder, 0)
    src = _source(folder)
    ds = TorchDataset(src, batch_size=8, seed=1, steps=5)
    next(iter(ds))  # the main process reads it first
    ds.load_state_dict(ds.state_at(0))
    dl = torch.utils.data.DataLoader(
        ds, batch_size=None, num_workers=2, multiprocessing_context=ctx
    )
    assert [b["index"].tolist() for b in dl] == alone_index
