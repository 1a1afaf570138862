"""``stats.fetches`` of an NPZ source whose members are kept inflated (``_npz.Inflated``,
shuffle="samples"): a read of rows of a file whose members are all kept fetches none of
its bytes, but was counted a fetch (of 0 bytes), so that fetches said a file a read (64
a file an epoch, map-style) where each file was fetched once. Now it counts the fetches
made: the files' opens, counted by a wrapper around the real open."""

from __future__ import annotations

import collections
from pathlib import Path

import numpy as np
import pytest

import headrace.formats._file_list as file_list
from _npz_pairs import write_pairs
from headrace.formats import FileSource
from headrace.io import LocalFile
from headrace.pipeline import Loader

N = 16
FILES = 4


@pytest.mark.parametrize("mode", ["map-style", "headrace"])
def test_a_kept_npz_is_not_counted_a_fetch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    deflated, _ = write_pairs(tmp_path, files=FILES, n=N, side=32, seed=55, y_step=1000)
    src = FileSource(
        deflated, format="npz", samples_per_file="header", shuffle="samples", mode=mode
    )
    opens: collections.Counter[str] = collections.Counter()
    real = file_list._listed

    def counted(path: str) -> LocalFile:
        opens[Path(path).name] += 1
        return real(path)

    monkeypatch.setattr(file_list, "_listed", counted)
    ys = []
    with Loader(src, batch_size=4, seed=7, steps=2 * FILES * N // 4) as loader:
        for b in loader:
            ys.append(b["y"])
    src.close()
    got = np.concatenate(ys)
    want = np.arange(N)[None, :] + 1000 * np.arange(FILES)[:, None]
    assert sorted(got.tolist()) == sorted(2 * want.ravel().tolist())  # every sample, twice
    assert dict(opens) == {f"f{i}.npz": 1 for i in range(FILES)}  # each file read once
    # Before: 128 (map-style: one a sample) and 19 (headrace: one a file a read).
    assert src.stats.fetches == FILES
    assert src.stats.bytes == sum(p.stat().st_size for p in deflated.glob("*.npz"))
