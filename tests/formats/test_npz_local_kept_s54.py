"""Local deflated NPZ files (np.savez_compressed) under shuffle="samples", their members
kept inflated (``_npz.Inflated``): a read of rows of a file whose members are all kept
read the file whole again all the same, to check it was still the version listed (an
object's was skipped). 4 files of 64 samples of 256 KiB, map-style: 64x the files'
bytes (1.8 GB for 28 MB) an epoch, about a fifth of its time in a hot page cache; on a
network mount, all of it from the server. Now a stat checks the version (size, device,
inode, mtime), and a file replaced, cut short or deleted is still refused, named.

Counted on real files: opens of a listed file by a wrapper around the real open, bytes
by the source's stats; batches compared with the same arrays stored (np.savez).
"""

from __future__ import annotations

import collections
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import headrace.formats._file_list as file_list
from _npz_pairs import write_pairs
from headrace.errors import ObjectNotFoundError, StorageError
from headrace.formats import FileSource
from headrace.io import LocalFile
from headrace.pipeline import Loader
from headrace.testing import batch_digest

N = 16  # samples a file
FILES = 4


def _write(root: Path) -> tuple[Path, Path]:
    return write_pairs(root, files=FILES, n=N, side=64, seed=54, y_step=1000)


@pytest.fixture
def opens(monkeypatch: pytest.MonkeyPatch) -> collections.Counter[str]:
    """Each listed local file's opens for a whole read, by name (the real open run)."""
    got: collections.Counter[str] = collections.Counter()
    real = file_list._listed

    def counted(path: str) -> LocalFile:
        got[Path(path).name] += 1
        return real(path)

    monkeypatch.setattr(file_list, "_listed", counted)
    return got


def _read(
    root: Path, opens: collections.Counter[str], *, epochs: int = 1, **kw: Any
) -> tuple[str, FileSource]:
    src = FileSource(root, format="npz", samples_per_file="header", shuffle="samples", **kw)
    opens.clear()  # (the count of samples read each file's header)
    with Loader(src, batch_size=4, seed=7, steps=epochs * FILES * N // 4) as loader:
        digest = batch_digest(loader)
    src.close()
    return digest, src


def _file_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.glob("*.npz"))


@pytest.mark.parametrize("mode", ["map-style", "headrace"])
def test_a_local_file_whose_members_are_kept_is_read_once(
    tmp_path: Path, opens: collections.Counter[str], mode: str
) -> None:
    deflated, stored = _write(tmp_path)
    got, src = _read(deflated, opens, epochs=2, mode=mode)
    # Before: read whole by every read asking a row of it (map-style: 32 reads a file).
    assert dict(opens) == {f"f{i}.npz": 1 for i in range(FILES)}
    assert src.stats.bytes == _file_bytes(deflated)
    want, plain = _read(stored, opens, epochs=2, mode=mode)
    assert got == want
    assert plain.stats.bytes > 4 * _file_bytes(stored)  # (nothing kept: read again)


def _kept_then(root: Path, opens: collections.Counter[str], change: Any, **kw: Any) -> None:
    """Read every sample (each file's members kept), ``change`` the files, read again."""
    src = FileSource(root, format="npz", samples_per_file="header", shuffle="samples", **kw)
    every = np.arange(FILES * N)
    opens.clear()  # (the count of samples read each file's header)
    try:
        assert sorted(src.read(7, every)["y"] // 1000) == sorted(every // N)
        change()
        src.read(7, every)
    finally:
        src.close()


def test_a_kept_file_replaced_is_refused_unread(
    tmp_path: Path, opens: collections.Counter[str]
) -> None:
    # (map-style: each read takes its files anew; under "headrace" a file the last read
    # held is checked so before it serves the next: test_file_held_s55.py)
    deflated, _ = _write(tmp_path)
    new = tmp_path / "new.npz"  # the same bytes, another file: another inode
    new.write_bytes((deflated / "f1.npz").read_bytes())
    with pytest.raises(StorageError, match=r"f1\.npz: the file changed since it was listed"):
        _kept_then(deflated, opens, lambda: os.replace(new, deflated / "f1.npz"), mode="map-style")
    assert opens["f1.npz"] == 1  # refused by its stat, not by reading it again


def test_a_kept_file_written_to_is_refused(tmp_path: Path, opens: collections.Counter[str]) -> None:
    deflated, _ = _write(tmp_path)
    path = deflated / "f2.npz"
    st = path.stat()

    def touch() -> None:  # its first bytes written again in place: a later mtime
        with open(path, "r+b") as f:
            f.write(path.read_bytes()[:4])
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # (coarse clocks)

    with pytest.raises(StorageError, match=r"f2\.npz: the file changed since it was listed"):
        _kept_then(deflated, opens, touch, mode="map-style")


def test_a_kept_file_cut_short_or_deleted_is_refused(
    tmp_path: Path, opens: collections.Counter[str]
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    deflated, _ = _write(tmp_path / "a")

    def cut() -> None:
        with open(deflated / "f3.npz", "r+b") as f:
            f.truncate(1000)

    with pytest.raises(StorageError, match=r"f3\.npz: truncated or changed"):
        _kept_then(deflated, opens, cut, mode="map-style")
    deflated, _ = _write(tmp_path / "b")
    with pytest.raises(ObjectNotFoundError, match=r"f0\.npz: no such file now; .* listed it"):
        _kept_then(deflated, opens, lambda: os.remove(deflated / "f0.npz"), mode="map-style")


def test_a_kept_file_whose_stat_fails_is_named(
    tmp_path: Path, opens: collections.Counter[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The version check's stat failing (EIO: a mount's server gone bad) is a
    StorageError naming the file, as an open's failure is (fault injection of
    ``os.stat`` on that path; the reads before it real)."""
    import errno

    deflated, _ = _write(tmp_path)
    target = str(deflated / "f2.npz")
    real = os.stat

    def fail() -> None:
        def failing(path: Any, *a: Any, **kw: Any) -> os.stat_result:
            if os.fspath(path) == target:
                raise OSError(errno.EIO, "Input/output error", target)
            return real(path, *a, **kw)

        monkeypatch.setattr(os, "stat", failing)

    with pytest.raises(StorageError) as caught:
        _kept_then(deflated, opens, fail, mode="map-style")
    assert caught.value.errno == errno.EIO
    assert "f2.npz" in str(caught.value) and "Input/output error" in str(caught.value)
