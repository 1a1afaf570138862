"""A local FileSource whose files change under a run: replaced, rewritten, resized."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np
import pytest

from headrace.errors import ObjectNotFoundError, StorageError
from headrace.formats import FileSource
from headrace.pipeline import Loader


def _dataset(root: Path) -> Path:
    root.mkdir()
    for i in range(3):
        np.save(root / f"f{i:03d}.npy", np.full((4, 8), i, dtype=np.uint8))
    return root


def _replace(path: Path, how: str) -> None:
    new = np.full((4, 8), 100, dtype=np.uint8)  # the same shape: the same size
    if how == "rename":
        np.save(path.with_suffix(".tmp.npy"), new)
        os.replace(path.with_suffix(".tmp.npy"), path)
    else:  # written in place, the inode kept
        with open(path, "r+b") as f:
            np.save(f, new)
        # A filesystem whose mtime ticks coarsely could leave it equal: move it on.
        st = os.stat(path)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


def _file0(src: FileSource, sample: int) -> np.ndarray:
    # shuffle="none": samples 0-3 are file 0's rows; each read is one fetch of it.
    return src.read(0, np.array([sample], dtype=np.int64))["data"][0]


@pytest.mark.parametrize("how", ["rename", "in place"])
@pytest.mark.parametrize("local_read", ["pread", "odirect"])
def test_a_file_replaced_by_one_of_its_size_is_refused_not_mixed_in(
    tmp_path: Path, how: str, local_read: str
) -> None:
    # Only the size was compared: a file renamed over or rewritten with the same size
    # was read as its new version for the rest of the epoch, one file's samples
    # coming from two versions of it (an object's new ETag was refused).
    root = _dataset(tmp_path / "d")
    # map-style: each sample is a fetch of its file (no read-ahead holds the old one).
    src = FileSource(root, format="npy", samples_per_file=4, shuffle="none",
                     mode="map-style", local_read=local_read)  # fmt: skip
    assert (_file0(src, 0) == 0).all()
    _replace(root / "f000.npy", how)
    with pytest.raises(StorageError, match=r"f000\.npy: the file changed since it was listed"):
        _file0(src, 1)
    # A worker's copy reads the versions its parent listed, and refuses the same.
    copy = pickle.loads(pickle.dumps(src))
    with pytest.raises(StorageError, match=r"f000\.npy: the file changed since it was listed"):
        _file0(copy, 2)
    # The files not touched read on; a new source reads the new version.
    assert (src.read(0, np.array([4], dtype=np.int64))["data"][0] == 1).all()
    copy.close()
    src.close()
    fresh = FileSource(root, format="npy", samples_per_file=4, shuffle="none", mode="map-style")
    assert (_file0(fresh, 1) == 100).all()
    fresh.close()


def test_a_loader_reading_a_file_once_a_sample_stops_at_the_replaced_file(
    tmp_path: Path,
) -> None:
    # shuffle="samples" reads a file once per sample along the epoch: every batch after
    # the rename held the new rows beside the old ones of batches before it.
    root = _dataset(tmp_path / "d")
    src = FileSource(root, format="npy", samples_per_file=4, shuffle="samples")
    seen: set[int] = set()
    with Loader(src, batch_size=2, seed=0, prefetch=0) as loader:
        seen.update(np.unique(loader.batch_at(0)["data"]).tolist())
        for i in range(3):
            _replace(root / f"f{i:03d}.npy", "rename")
        with pytest.raises(StorageError, match=r"f00\d\.npy: the file changed since it was"):
            for step in range(1, 6):
                seen.update(np.unique(loader.batch_at(step)["data"]).tolist())
    assert 100 not in seen


def test_a_file_that_grew_is_refused_by_its_sizes(tmp_path: Path) -> None:
    root = _dataset(tmp_path / "d")
    src = FileSource(root, format="npy", samples_per_file=4, shuffle="none")
    np.save(root / "f000.npy", np.full((5, 8), 0, dtype=np.uint8))
    with pytest.raises(StorageError, match=r"f000\.npy: truncated or changed.*said 160"):
        _file0(src, 0)
    src.close()


@pytest.mark.parametrize(
    "options",
    [{"local_read": "pread"}, {"local_read": "odirect"}, {"npy_ranges_above": 1}],
    ids=["pread", "odirect", "row ranges"],
)
def test_a_file_deleted_during_the_run_is_named_as_such(
    tmp_path: Path, options: dict[str, object]
) -> None:
    # Until 2026-12-03 the error guessed a typo: "f001.npy: no such file; did you mean
    # 'f000.npy'?", for a file the source had listed and read.
    root = _dataset(tmp_path / "d")
    src = FileSource(root, format="npy", samples_per_file=4, shuffle="none",
                     mode="map-style", **options)  # fmt: skip
    assert (_file0(src, 0) == 0).all()
    (root / "f001.npy").unlink()
    with pytest.raises(ObjectNotFoundError) as info:
        src.read(0, np.array([4], dtype=np.int64))
    msg = str(info.value)
    assert "f001.npy: no such file now; the file source listed it before" in msg, msg
    assert "did you mean" not in msg
    assert (_file0(src, 1) == 0).all()  # the files still there read on
    src.close()
