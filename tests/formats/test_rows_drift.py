"""Row files replaced under a source: between two loaders over it, and in a worker's copy."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np
import pytest

from headrace.errors import ObjectNotFoundError, StorageError
from headrace.formats import PaddedRows, PairRows, write_row_file
from headrace.io import ReaderConfig
from headrace.io._uring import ring_pool
from headrace.pipeline import Loader

_REPLACED = r"\.(npy|bin): the file was replaced since the source opened it"


def _rows(path: Path, value: int) -> None:
    # Written beside and renamed over: a new inode of the same size.
    tmp = path.with_name("tmp" + path.name)
    write_row_file(tmp, np.full((64, 9), value, dtype=np.int32))
    os.replace(tmp, path)
    if path.suffix == ".bin":
        os.replace(str(tmp) + ".json", str(path) + ".json")


def _values(src: PaddedRows | PairRows, steps: range) -> set[int]:
    seen: set[int] = set()
    with Loader(src, batch_size=4, seed=0, prefetch=0) as loader:
        for step in steps:
            for name, a in loader.batch_at(step).items():
                if name.endswith("x"):
                    seen.update(np.unique(a).tolist())
    return seen


@pytest.mark.parametrize("engine", ["threads", "uring"])
@pytest.mark.parametrize("strategy", ["mmap", "pread", "odirect"])
def test_a_row_file_renamed_over_is_refused_after_close_and_in_a_copy(
    tmp_path: Path, strategy: str, engine: str
) -> None:
    # A loader's close() closes the reader; the next loader over the source (each
    # epoch of a TorchDataset) and a worker's copy opened the path anew, and read
    # the new file's rows in the epoch the old one's began.
    if engine == "uring" and not ring_pool().available():
        pytest.skip(f"io_uring unavailable: {ring_pool().reason}")
    path = tmp_path / "rows.npy"
    _rows(path, 1)
    reader = ReaderConfig(strategy=strategy, engine=engine)  # type: ignore[arg-type]
    src = PaddedRows(path, context=8, reader=reader)
    assert _values(src, range(2)) == {1}
    _rows(path, 2)
    copy = pickle.loads(pickle.dumps(src))
    for s in (src, copy):
        with pytest.raises(StorageError, match=_REPLACED):
            _values(s, range(2, 4))
    # A new source reads the new file.
    assert _values(PaddedRows(path, context=8, reader=reader), range(2)) == {2}


@pytest.mark.parametrize("strategy", ["mmap", "pread"])
def test_a_row_file_deleted_during_the_run_is_named_as_such(tmp_path: Path, strategy: str):
    # Until 2026-12-03: "rows.npy: no such file; did you mean 'rows2.npy'?" at the
    # next loader (each epoch of a TorchDataset) or in a worker's copy.
    path = tmp_path / "rows.npy"
    _rows(path, 1)
    _rows(tmp_path / "rows2.npy", 1)
    src = PaddedRows(path, context=8, reader=ReaderConfig(strategy=strategy))  # type: ignore[arg-type]
    assert _values(src, range(2)) == {1}
    copy = pickle.loads(pickle.dumps(src))
    path.unlink()
    for s in (src, copy):
        with pytest.raises(ObjectNotFoundError) as info:
            _values(s, range(2, 4))
        msg = str(info.value)
        assert "rows.npy: no such file now; the source opened it before" in msg, msg
        assert "did you mean" not in msg


def test_a_pair_member_renamed_over_is_refused(tmp_path: Path) -> None:
    a, b = tmp_path / "a.npy", tmp_path / "b.bin"
    _rows(a, 1)
    _rows(b, 3)
    src = PairRows({"a": str(a), "b": str(b)})
    assert _values(src, range(1)) == {1, 3}
    _rows(b, 4)
    with pytest.raises(StorageError, match=r"b" + _REPLACED):
        _values(src, range(1, 2))
