"""A token file cut short after its source opened it, before the source first maps it:
the map is then shorter than the window, and the first read was a ``ValueError`` from
deep inside ("madvise range [12288, 14058) is not within the map"), naming no file."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from headrace.errors import StorageError
from headrace.formats import TokenSource


@pytest.mark.parametrize("reads", ["populate", "pread"])
def test_a_file_cut_short_before_its_first_read_is_named(tmp_path: Path, reads: str) -> None:
    path = tmp_path / "a.bin"
    np.arange(100_000, dtype=np.uint16).tofile(path)
    src = TokenSource(path, context=7, dtype="uint16", shuffle=False, reads=reads)
    os.truncate(path, 5_000)
    with pytest.raises(StorageError, match=r"a\.bin: .*5000 bytes") as info:
        src.read(0, np.arange(1_000, 1_004))
    assert "madvise" not in str(info.value)
    src.close()


def test_a_file_cut_short_after_its_window_was_shed_is_named(tmp_path: Path) -> None:
    # A window of the first file evicted (max_windows=1) and mapped again after the cut.
    paths = [tmp_path / f"{i}.bin" for i in range(2)]
    for p in paths:
        np.arange(100_000, dtype=np.uint16).tofile(p)
    src = TokenSource(paths, context=7, dtype="uint16", shuffle=False, max_windows=1)
    per_file = src.samples_per_epoch // 2
    src.read(0, np.arange(4))
    src.read(0, np.arange(per_file, per_file + 4))  # the second file's window
    os.truncate(paths[0], 5_000)
    with pytest.raises(StorageError, match=r"0\.bin: .*5000 bytes"):
        src.read(0, np.arange(1_000, 1_004))
    src.close()
