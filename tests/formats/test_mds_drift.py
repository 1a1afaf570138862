"""A local MDSSource whose shards change under a run: rewritten in place, renamed over
(read by a worker's copy), deleted."""

from __future__ import annotations

import os
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest

from _mds_files import write_mds
from headrace.errors import ObjectNotFoundError, StorageError
from headrace.formats import MDSSource

COLUMNS = {"id": "int", "x": "ndarray:float32:16"}


def _write(root: Path, seed: int, compression: str | None) -> None:
    rng = np.random.default_rng(seed)
    samples = [{"id": k, "x": rng.standard_normal(16).astype(np.float32)} for k in range(40)]
    write_mds(root, COLUMNS, samples, per_shard=10, compression=compression)


def _shard2(root: Path) -> Path:
    return next(root.glob("shard.00002.mds*"))


@pytest.mark.parametrize("compression", [None, "zstd"])
@pytest.mark.parametrize("how", ["in place", "renamed over"])
def test_a_shard_rewritten_with_another_of_its_size_is_refused_not_read(
    tmp_path: Path, compression: str | None, how: str
) -> None:
    # Until 2026-12-04 a local MDS shard was read by path with no look at its version:
    # one written in place was read as its new samples beside the old ones read before,
    # and a worker's copy read one renamed over as the new file.
    if compression:
        pytest.importorskip("zstandard")
    root, other = tmp_path / "ds", tmp_path / "other"
    _write(root, 1, compression)
    _write(other, 2, compression)  # the same sizes, other values
    new = _shard2(other).read_bytes()
    assert len(new) == _shard2(root).stat().st_size
    src = MDSSource(root, shuffle=False)
    src.read(0, np.arange(10))  # shard 0
    shard = _shard2(root)
    if how == "in place":
        with open(shard, "r+b") as f:
            f.write(new)
        st = os.stat(shard)  # a filesystem whose mtime ticks coarsely: move it on
        os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
        reader = src
    else:
        (root / "tmp").write_bytes(new)
        os.replace(root / "tmp", shard)
        reader = pickle.loads(pickle.dumps(src))  # a worker's copy opens it by path
    with pytest.raises(StorageError, match=rf"{shard.name}: the file changed since it was listed"):
        reader.read(0, np.arange(20, 30))
    # The other shards read on.
    assert reader.read(0, np.arange(30, 40))["id"].tolist() == list(range(30, 40))
    if reader is not src:
        reader.close()
    src.close()


def test_a_shard_deleted_under_a_workers_copy_is_named_as_such(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    _write(root, 1, None)
    src = MDSSource(root, shuffle=False)
    src.read(0, np.arange(10))
    copy = pickle.loads(pickle.dumps(src))
    _shard2(root).unlink()
    with pytest.raises(ObjectNotFoundError) as info:
        copy.read(0, np.arange(20, 30))
    msg = str(info.value)
    assert "shard.00002.mds: no such file now; the MDS source listed it before" in msg, msg
    copy.close()
    src.close()
    shutil.rmtree(root)
