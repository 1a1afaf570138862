"""Deflated NPZ members of many samples (np.savez_compressed) inflated once for the
reads of a file, not once a read: under shuffle="files" a file's rows straddle reads
(the last file of one read is the first of the next), and until 2026-12-07 each of
those reads inflated its members whole again (3 files, an epoch: 14 inflations of 6
members). Counted by a wrapper around the inflate the decode calls (it runs the real
one); the batches are compared with the same arrays stored (np.savez: nothing inflated).
"""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import headrace.formats._npz as npz
from headrace.formats import FileSource
from headrace.pipeline import Loader
from headrace.testing import assert_resume_exact, batch_digest

N = 32  # samples a file


def _write(root: Path, files: int = 3) -> tuple[Path, Path]:
    """The same arrays deflated (np.savez_compressed) and stored (np.savez)."""
    rng = np.random.default_rng(51)
    deflated, stored = root / "deflated", root / "stored"
    deflated.mkdir()
    stored.mkdir()
    for i in range(files):
        x = rng.integers(0, 16, (N, 16, 24)).astype(np.float32)
        y = np.arange(N, dtype=np.int64) + 1000 * i
        np.savez_compressed(deflated / f"f{i}.npz", x=x, y=y)
        np.savez(stored / f"f{i}.npz", x=x, y=y)
    return deflated, stored


def _digest(root: Path, *, steps: int = 3 * N // 4, **kw: Any) -> str:
    kw.setdefault("shuffle", "files")
    src = FileSource(root, format="npz", samples_per_file="header", **kw)
    with Loader(src, batch_size=4, seed=7, steps=steps) as loader:
        digest = batch_digest(loader)
    src.close()
    return digest


@pytest.mark.parametrize("threads", [0, 2])
def test_an_epoch_under_shuffle_files_inflates_each_member_once(
    tmp_path: Path, inflations: collections.Counter[str], threads: int
) -> None:
    deflated, stored = _write(tmp_path)
    got = _digest(deflated, decode_threads=threads)
    members = {f"f{i}.npz: member '{k}.npy'" for i in range(3) for k in "xy"}
    # Before: 14 inflations (f0's members 4 times each: the first reads are of 1, 2, 4
    # steps, so its rows straddled 4 of them; f2's twice).
    assert dict(inflations) == dict.fromkeys(members, 1)
    assert got == _digest(stored, decode_threads=threads)


def test_two_epochs_and_shuffle_none_inflate_each_member_once_an_epoch(
    tmp_path: Path, inflations: collections.Counter[str]
) -> None:
    deflated, stored = _write(tmp_path)
    for shuffle in ("files", "none"):
        inflations.clear()
        got = _digest(deflated, steps=2 * 3 * N // 4, shuffle=shuffle)
        assert set(inflations.values()) == {2}, (shuffle, inflations)
        assert got == _digest(stored, steps=2 * 3 * N // 4, shuffle=shuffle)


def test_workers_resume_and_shuffle_samples_give_the_stored_files_batches(
    tmp_path: Path, inflations: collections.Counter[str]
) -> None:
    deflated, stored = _write(tmp_path)
    for shuffle in ("files", "samples"):
        want = _digest(stored, steps=2 * 3 * N // 4, shuffle=shuffle)
        assert _digest(deflated, steps=2 * 3 * N // 4, shuffle=shuffle) == want
        # Two loader workers (every other step each): their steps in turn are the stream.
        parts = []
        for w in range(2):
            src = FileSource(deflated, format="npz", samples_per_file="header", shuffle=shuffle)
            with Loader(
                src, batch_size=4, seed=7, steps=3 * N // 4, step_stride=2, step_offset=w
            ) as loader:
                parts.append([batch_digest([b]) for b in loader])
            src.close()
        with Loader(
            FileSource(stored, format="npz", samples_per_file="header", shuffle=shuffle),
            batch_size=4,
            seed=7,
            steps=3 * N // 4,
        ) as loader:
            straight = [batch_digest([b]) for b in loader]
        assert [parts[t % 2][t // 2] for t in range(3 * N // 4)] == straight
    assert_resume_exact(
        lambda: Loader(
            FileSource(deflated, format="npz", samples_per_file="header"),
            batch_size=4,
            seed=7,
            steps=3 * N // 4,
            chunk_steps=4,
        ),
        steps=3 * N // 4,
        resume_at=[1, 5, 11],
    )


def test_members_over_the_bound_are_inflated_by_each_read_as_before(
    tmp_path: Path, inflations: collections.Counter[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    deflated, stored = _write(tmp_path)
    # x is 32 x 16 x 24 float32 (48 KiB, with its header): over a 40 KiB bound, not kept;
    # y (256 bytes) still is.
    monkeypatch.setattr(npz, "KEPT_INFLATED", 40 << 10)
    got = _digest(deflated)
    assert max(v for k, v in inflations.items() if "'x.npy'" in k) > 1
    assert {v for k, v in inflations.items() if "'y.npy'" in k} == {1}
    assert got == _digest(stored)


def test_only_the_file_kept_for_the_next_read_keeps_its_members(
    tmp_path: Path, inflations: collections.Counter[str]
) -> None:
    deflated, _ = _write(tmp_path)
    src = FileSource(deflated, format="npz", samples_per_file="header", shuffle="none")
    rows = np.arange(N // 2, N, dtype=np.int64)
    src.read(0, np.arange(0, 4))  # f0's rows, f0 kept: its members inflated and kept
    first = src.read(0, np.arange(4, 8))  # from them
    assert dict(inflations) == {"f0.npz: member 'x.npy'": 1, "f0.npz: member 'y.npy'": 1}
    src.read(0, N + np.arange(4))  # f1 only: f0 let go, f1 kept
    again = src.read(0, np.arange(4, 8))  # f0 inflated again (one file kept, not all)
    assert inflations["f0.npz: member 'x.npy'"] == 2
    assert inflations["f1.npz: member 'x.npy'"] == 1
    for k in ("x", "y"):
        np.testing.assert_array_equal(first[k], again[k])
        np.testing.assert_array_equal(first[k], np.load(deflated / "f0.npz")[k][4:8])
    # f0's second half (kept: not inflated) and f1's first rows (inflated, kept now).
    inflations.clear()
    got = src.read(0, np.concatenate([rows, N + np.arange(4)]))
    assert dict(inflations) == {"f1.npz: member 'x.npy'": 1, "f1.npz: member 'y.npy'": 1}
    np.testing.assert_array_equal(got["y"], np.concatenate([rows, 1000 + np.arange(4)]))
    src.close()
