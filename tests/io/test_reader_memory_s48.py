"""What a RangeReader keeps per file it has read, over many files (s48)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from headrace.io import RangeReader
from headrace.io import _reader as reader_mod


def test_the_files_remembered_as_checked_are_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An adaptive reader remembered every path it had read (to check a file's first mapped
    # read once): over a dataset of millions of small files, a set that only grew (~150 MB
    # a million paths). Past CHECKED, one is forgotten and checked again when next read.
    monkeypatch.setattr(reader_mod, "CHECKED", 4)
    arr = np.arange(64, dtype=np.uint8)
    paths = []
    for i in range(10):
        p = tmp_path / f"{i}.bin"
        p.write_bytes(arr.tobytes())
        paths.append(str(p))
    with RangeReader("adaptive", clock=lambda: 0.0) as r:  # never slow: always mapped
        for p in paths + paths:
            assert r.read(p, [(3, 5)])[0].tobytes() == arr[3:8].tobytes()
        assert len(r._checked) <= 4
        # Each first read of a file not remembered is checked again: at most a residency
        # check (and one sample read of a cold row) per read, never more.
        assert 10 <= r.stats.mapped_checks <= 20
