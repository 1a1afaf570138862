"""A local token file replaced under a source: between two loaders over it, in a copy."""

from __future__ import annotations

import errno
import os
import pickle
from pathlib import Path

import numpy as np
import pytest

from headrace.errors import StorageError
from headrace.formats import TokenSource
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
