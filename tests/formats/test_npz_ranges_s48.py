"""NPZ files read by rows (``npz_ranges_above``): members picked that leave out the
first, counts given that are wrong, local and through file:// (read as objects are)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from headrace.formats import FileSource
from headrace.pipeline import Loader
from headrace.testing import batch_digest


def _digest(src: FileSource) -> str:
    with Loader(src, batch_size=3, seed=0, steps=3) as loader:
        return batch_digest(loader)


@pytest.mark.parametrize("remote", [False, True])
def test_members_picked_past_the_first_read_by_rows_as_whole(tmp_path: Path, remote: bool) -> None:
    # The zip's first bytes (its magic, checked by the decode) lie in the first member's
    # local header: read by rows with that member not picked, they were not fetched and
    # the file was refused as "not an NPZ (zip) file: starts with b'\x00\x00\x00\x00'".
    for i in range(2):
        n = 5 + i
        np.savez(tmp_path / f"f{i}.npz", x=np.zeros((n, 1024)), y=np.arange(n) + 10 * i)
    where = f"file://{tmp_path}/*.npz" if remote else tmp_path
    kw = {"format": "npz", "shuffle": "samples", "samples_per_file": "header"}
    ranged = FileSource(where, npz_ranges_above=0, datasets=("y",), **kw)
    whole = FileSource(where, datasets=("y",), **kw)
    assert ranged._by_rows is not None and whole._by_rows is None
    assert _digest(ranged) == _digest(whole)
    got = ranged.read(0, np.arange(11))
    assert sorted(got["y"].tolist()) == [0, 1, 2, 3, 4, 10, 11, 12, 13, 14, 15]
    ranged.close()
    whole.close()
