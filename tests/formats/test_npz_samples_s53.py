"""Deflated NPZ files of many samples (np.savez_compressed) under shuffle="samples":
every read asks a few rows of most files, and until 2026-12-07 each such read inflated
the file's members whole again (only the file a read ended on was kept inflated for the
next): 4 files of 64 samples, two epochs of batches of 4 inflated each member 4-8 times;
8 files of 2,000 samples of 4 KiB, up to 12 times an epoch (6.7 s vs 0.9 s under "files").
Members are now kept inflated across reads, bounded (``KEPT_INFLATED`` bytes in all),
and a dataset over the bound warns once, saying what to do. Counted by a wrapper around
the inflate the decode calls (it runs the real one); batches compared with the same
arrays stored (np.savez: nothing inflated).
"""

from __future__ import annotations

import collections
import warnings
from pathlib import Path
from typing import Any

import pytest

import headrace.formats._npz as npz
from _npz_pairs import write_pairs
from headrace.formats import FileSource
from headrace.pipeline import Loader
from headrace.testing import batch_digest

N = 64  # samples a file
FILES = 4


def _write(root: Path) -> tuple[Path, Path]:
    return write_pairs(root, files=FILES, n=N, side=32, seed=53, y_step=1000)


def _digest(root: Path, *, epochs: int = 1, **kw: Any) -> str:
    src = FileSource(root, format="npz", samples_per_file="header", shuffle="samples", **kw)
    with Loader(src, batch_size=4, seed=7, steps=epochs * FILES * N // 4) as loader:
        digest = batch_digest(loader)
    src.close()
    return digest


MEMBERS = {f"f{i}.npz: member '{k}.npy'" for i in range(FILES) for k in "xy"}


@pytest.mark.parametrize("threads", [0, 2])
def test_shuffle_samples_inflates_each_member_once_over_two_epochs(
    tmp_path: Path, inflations: collections.Counter[str], threads: int
) -> None:
    deflated, stored = _write(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # under the bound: nothing to say
        got = _digest(deflated, epochs=2, decode_threads=threads)
    # Before: 4 to 8 inflations of each member (a read, a loader chunk of 1, 2, 4...
    # steps, asked rows of most files, and inflated each whole).
    assert dict(inflations) == dict.fromkeys(MEMBERS, 1)
    assert got == _digest(stored, epochs=2, decode_threads=threads)


def test_over_the_bound_members_are_let_go_and_it_warns_once(
    tmp_path: Path, inflations: collections.Counter[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    deflated, stored = _write(tmp_path)
    # x is 64 KiB (with its header) a file: two files' members fit, not four.
    monkeypatch.setattr(npz, "KEPT_INFLATED", 140 << 10)
    kept: list[int] = []
    put = npz.Inflated.put

    def watched(self: npz.Inflated, *a: Any) -> None:
        put(self, *a)
        kept.append(self.nbytes)

    monkeypatch.setattr(npz.Inflated, "put", watched)
    with pytest.warns(UserWarning, match=r"np\.savez\b.*shuffle=\"files\"") as said:
        got = _digest(deflated)
    assert len([w for w in said if "inflate" in str(w.message)]) == 1
    assert "deflated/f" in str(said[0].message)  # names a file
    assert kept and max(kept) <= 140 << 10  # never more than the bound kept
    assert max(inflations.values()) > 1  # (members let go are inflated again)
    assert got == _digest(stored)


def test_a_member_over_the_bound_alone_is_read_by_rows_as_before(
    tmp_path: Path, inflations: collections.Counter[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    deflated, stored = _write(tmp_path)
    monkeypatch.setattr(npz, "KEPT_INFLATED", 40 << 10)  # x (64 KiB) never fits; y does
    with pytest.warns(UserWarning, match="inflate"):
        got = _digest(deflated)
    assert {v for k, v in inflations.items() if "'y.npy'" in k} == {1}
    assert got == _digest(stored)
