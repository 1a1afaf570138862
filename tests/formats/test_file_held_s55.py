"""A local file the last read kept for the next one (mode="headrace": a read's last file
of several samples stays held, its bytes or its map, for the next read's rows of it) is
checked to be the version listed before it serves that read, as every other read of a
file is: until 2026-12-07 a file replaced, rewritten, cut short or deleted between two
reads served the next read from what was held, unchecked, for every format (map-style,
which fetches again, refused it, named). The check is a stat of its path: the file is
not read again (counted: opens of a listed file, by a wrapper around the real open).

Real files written by numpy, h5py and tarfile; batches compared with np.load of them.
"""

from __future__ import annotations

import collections
import io
import os
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import headrace.formats._file_list as file_list
from headrace.errors import ObjectNotFoundError, StorageError
from headrace.formats import FileSource
from headrace.io import LocalFile

N = 8  # samples a file
FILES = 3


def _npy(path: Path, a: np.ndarray) -> None:
    np.save(path, a)


def _npz(path: Path, a: np.ndarray) -> None:
    np.savez(path, x=a)


def _npz_deflated(path: Path, a: np.ndarray) -> None:
    np.savez_compressed(path, x=a)


def _hdf5(path: Path, a: np.ndarray) -> None:
    h5py = pytest.importorskip("h5py")
    with h5py.File(path, "w") as f:
        f["x"] = a


def _tar(path: Path, a: np.ndarray) -> None:
    with tarfile.open(path, "w") as t:
        for i, row in enumerate(a):
            out = io.BytesIO()
            np.save(out, row)
            info = tarfile.TarInfo(f"{i:06d}.x.npy")
            info.size = len(out.getvalue())
            t.addfile(info, io.BytesIO(out.getvalue()))


# name: (writer, extension, source options, the batch key); "npy-mapped": 1 MiB files
# read by rows, through a map of the file kept open (formats/_npy_ranges.py).
FORMATS: dict[str, tuple[Callable[[Path, np.ndarray], None], str, dict[str, Any], str]] = {
    "npy": (_npy, ".npy", {"format": "npy", "samples_per_file": N}, "data"),
    "npy-mapped": (
        _npy,
        ".npy",
        {"format": "npy", "samples_per_file": "header", "npy_ranges_above": 0},
        "data",
    ),
    "npz": (_npz, ".npz", {"format": "npz", "samples_per_file": "header"}, "x"),
    "npz-deflated": (_npz_deflated, ".npz", {"format": "npz", "samples_per_file": "header"}, "x"),
    "hdf5": (
        _hdf5,
        ".h5",
        {"format": "hdf5", "samples_per_file": "header", "datasets": ("x",)},
        "x",
    ),
    "tar": (_tar, ".tar", {"format": "tar"}, "x.npy"),
}


def _rows(k: int, fmt: str, fill: int | None = None) -> np.ndarray:
    cols = 16384 if fmt == "npy-mapped" else 16
    a = np.full((N, cols), k if fill is None else fill, np.int64)
    return a + (np.arange(N)[:, None] * 10 if fill is None else 0)


@pytest.fixture
def opens(monkeypatch: pytest.MonkeyPatch) -> collections.Counter[str]:
    """Each listed local file's opens, by name (the real open run)."""
    got: collections.Counter[str] = collections.Counter()
    real = file_list._listed

    def counted(path: str) -> LocalFile:
        got[Path(path).name] += 1
        return real(path)

    monkeypatch.setattr(file_list, "_listed", counted)
    return got


def _written(root: Path, fmt: str, **more: Any) -> tuple[FileSource, Path]:
    write, ext, kw, _ = FORMATS[fmt]
    for k in range(FILES):
        write(root / f"f{k}{ext}", _rows(k, fmt))
    return FileSource(root, shuffle="none", **kw, **more), root / f"f0{ext}"


def _first(batch: dict[str, Any], fmt: str) -> list[int]:
    got = batch[FORMATS[fmt][3]]
    return [int(np.asarray(g).reshape(-1)[0]) for g in got]


def _replace(path: Path, fmt: str, tmp: Path) -> None:
    new = tmp / f"new{path.suffix}"  # (same filesystem, not listed)
    FORMATS[fmt][0](new, _rows(0, fmt, fill=77))
    os.replace(new, path)


def _rewrite(path: Path, fmt: str, tmp: Path) -> None:
    # Written again in place, its size kept (np.save of another array of the same shape
    # is as long; a later mtime for coarse clocks).
    st = path.stat()
    new = tmp / f"new{path.suffix}"
    FORMATS[fmt][0](new, _rows(0, fmt, fill=77))
    raw = new.read_bytes()[: st.st_size].ljust(st.st_size, b"\0")
    with open(path, "r+b") as f:
        f.write(raw)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


def _cut(path: Path, fmt: str, tmp: Path) -> None:
    with open(path, "r+b") as f:
        f.truncate(100)


def _delete(path: Path, fmt: str, tmp: Path) -> None:
    os.remove(path)


CHANGES = {
    "replaced": (_replace, StorageError, "the file changed since it was listed|truncated or ch"),
    "rewritten": (_rewrite, StorageError, "the file changed since it was listed"),
    "cut": (_cut, StorageError, "truncated or changed"),
    "deleted": (_delete, ObjectNotFoundError, "no such file now"),
}


@pytest.mark.parametrize("change", list(CHANGES))
@pytest.mark.parametrize("fmt", list(FORMATS))
def test_a_held_file_changed_between_reads_is_refused(
    tmp_path: Path, fmt: str, change: str
) -> None:
    (tmp_path / "d").mkdir()
    src, path = _written(tmp_path / "d", fmt)
    how, error, said = CHANGES[change]
    try:
        # The first read's last file is f0, whose rows 4..7 the next read asks.
        assert _first(src.read(0, np.arange(4)), fmt) == [0, 10, 20, 30]
        how(path, fmt, tmp_path)
        with pytest.raises(error, match=rf"f0\.\w+: ({said})"):
            # Before: served from what was held, f0's old rows ([40, 50, 60, 70]) where
            # the disk holds 77s, or nothing.
            src.read(0, np.arange(4, 8))
    finally:
        src.close()


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_a_held_file_unchanged_is_not_read_again(
    tmp_path: Path, fmt: str, opens: collections.Counter[str]
) -> None:
    # (Not speculating: the last read's guess of the next epoch's first samples fetched
    # f0 again.)
    src, path = _written(tmp_path, fmt, speculate=False)
    try:
        opens.clear()  # (counting samples read headers)
        got = [_first(src.read(0, np.arange(s, s + 4)), fmt) for s in range(0, FILES * N, 4)]
        assert got == [[k + 10 * i for i in range(s, s + 4)] for k in range(FILES) for s in (0, 4)]
        disk = np.load(path) if fmt.startswith("npy") else None
        if disk is not None:
            assert disk[:, 0].tolist() == got[0] + got[1]
        # Each file opened once: the read after the first of each file took it as held.
        assert dict(opens) == {f"f{k}{path.suffix}": 1 for k in range(FILES)}
    finally:
        src.close()
