"""A local token file replaced under a source: between two loaders over it, in a copy."""

from __future__ import annotations

import errno
import os
import pickle
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from headrace.errors import ObjectNotFoundError, StorageError
from headrace.formats import TokenSource, table_token_files
from headrace.pipeline import Loader


def _tokens(path: Path, value: int) -> None:
    np.full(1 << 15, value, dtype=np.uint16).tofile(path.with_name("tmp"))
    os.replace(path.with_name("tmp"), path)  # another inode, the same size


@pytest.mark.parametrize("reads", ["populate", "pread"])
def test_a_token_file_renamed_over_is_refused_saying_why_it_was_reopened(
    tmp_path: Path, reads: str
) -> None:
    # Refused before, but the message said the source had closed the file "to keep at
    # most 64 idle files open": here a loader's close() (each epoch of a TorchDataset)
    # and a worker's copy closed it, with one file open.
    path = tmp_path / "tok.bin"
    _tokens(path, 1)
    src = TokenSource(path, context=32, dtype="uint16", window_bytes=1 << 14,
                      block_bytes=1 << 12, reads=reads)  # fmt: skip
    with Loader(src, batch_size=4, seed=0, prefetch=0) as loader:
        assert set(np.unique(loader.batch_at(0)["x"]).tolist()) == {1}
    _tokens(path, 2)
    for s in (src, pickle.loads(pickle.dumps(src))):
        with (
            pytest.raises(StorageError, match=r"tok\.bin: the file was replaced since") as info,
            Loader(s, batch_size=4, seed=0, prefetch=0) as loader,
        ):
            for step in range(1, 40):  # every window of the epoch
                loader.batch_at(step)
        assert info.value.errno == errno.ESTALE
        assert "at close(), or in a worker's copy" in str(info.value)


def _shards(root: Path, first: int) -> None:
    # Two shards of a save_to_disk-like folder, written beside and renamed over: the
    # same names and sizes, other tokens.
    root.mkdir(exist_ok=True)
    for i in range(2):
        rows = [np.full(50, first + i, dtype=np.int32)] * 40
        table = pa.table({"input_ids": pa.array(rows, type=pa.list_(pa.int32()))})
        with pa.ipc.new_stream(root / "tmp", table.schema) as w:
            w.write_table(table, max_chunksize=10)
        os.replace(root / "tmp", root / f"data-{i:05d}-of-00002.arrow")


def test_packed_shards_saved_again_are_refused_not_read_at_the_old_ranges(
    tmp_path: Path,
) -> None:
    # table_token_files finds where each shard's token lists lie; the source opened the
    # shards at their first read and after close() (and in a worker's copy), checking
    # only that they were long enough: a dataset saved again under the same names was
    # read at those ranges (its tokens, or its headers and offsets taken for tokens).
    root = tmp_path / "ds"
    _shards(root, 10)
    src = TokenSource(table_token_files(root), context=16, window_bytes=1 << 14,
                      block_bytes=1 << 12)  # fmt: skip
    with Loader(src, batch_size=4, seed=0, prefetch=0) as loader:
        assert set(np.unique(loader.batch_at(0)["x"]).tolist()) <= {10, 11}
    blob = pickle.dumps(src)
    unread = TokenSource(table_token_files(root), context=16)  # planned, nothing read yet
    _shards(root, 1000)
    for s in (src, pickle.loads(blob), unread):
        with (
            pytest.raises(
                StorageError, match=r"data-0000\d-of-00002\.arrow: the file changed"
            ) as info,
            Loader(s, batch_size=4, seed=0, prefetch=0) as loader,
        ):
            for step in range(1, 60):  # every window
                loader.batch_at(step)
        assert info.value.errno == errno.ESTALE
    fresh = TokenSource(table_token_files(root), context=16)
    with Loader(fresh, batch_size=4, seed=0, prefetch=0) as loader:
        assert set(np.unique(loader.batch_at(0)["x"]).tolist()) <= {1000, 1001}


@pytest.mark.parametrize("reads", ["populate", "pread"])
def test_a_token_file_is_pinned_when_opened_not_at_its_first_read(
    tmp_path: Path, reads: str
) -> None:
    # The size, sidecar and index are read when the source opens the file, but the
    # file was pinned at its first read: one renamed over in between was read as the
    # new file, and each worker's copy (a torch DataLoader's, of a source the parent
    # never read) pinned whichever file it found first.
    path = tmp_path / "tok.bin"
    _tokens(path, 1)
    src = TokenSource(path, context=32, dtype="uint16", reads=reads)
    blob = pickle.dumps(src)
    _tokens(path, 2)
    for s in (src, pickle.loads(blob)):
        with (
            pytest.raises(StorageError, match=r"tok\.bin: the file was replaced since"),
            Loader(s, batch_size=4, seed=0, prefetch=0) as loader,
        ):
            loader.batch_at(0)


@pytest.mark.parametrize("reads", ["populate", "pread"])
def test_a_shard_deleted_during_the_run_is_named_as_such(tmp_path: Path, reads: str) -> None:
    # Until 2026-12-03 the error guessed a typo: "tok1.bin: no such file; did you mean
    # 'tok0.bin'?", for a shard the source had opened and read from.
    for i in range(2):
        np.full(1 << 15, i, dtype=np.uint16).tofile(tmp_path / f"tok{i}.bin")
    src = TokenSource(tmp_path, context=32, dtype="uint16", window_bytes=1 << 14,
                      block_bytes=1 << 12, reads=reads)  # fmt: skip
    with Loader(src, batch_size=4, seed=0, prefetch=0) as loader:
        loader.batch_at(0)
    (tmp_path / "tok1.bin").unlink()
    with (
        pytest.raises(ObjectNotFoundError) as info,
        Loader(src, batch_size=4, seed=0, prefetch=0) as loader,
    ):
        for step in range(520):  # every window of the epoch (511 steps)
            loader.batch_at(step)
    msg = str(info.value)
    assert "tok1.bin: no such file now; the token source opened it before" in msg, msg
    assert "did you mean" not in msg
