"""The object cache on a user's journey (session 51): an entry changed on disk while a
run goes on is caught, not served, by a process that had checked it already."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from s3util import BUCKET, FAST_RETRY, S3Fixture

from headrace.emulate import LatencyProxy
from headrace.formats import FileSource, TableSource
from headrace.pipeline import Loader
from headrace.testing import batch_digest

pytestmark = pytest.mark.integration

FILES = 8
PREFIX = "cache-journey-s51"


@pytest.fixture(scope="module")
def arrays(s3: S3Fixture) -> str:
    client = s3.server.info.boto3_client()
    for i in range(FILES):
        path = Path(f"/tmp/{PREFIX}-{i}.npy")
        np.save(path, np.random.default_rng(i).standard_normal((16, 16)).astype(np.float32))
        client.put_object(Bucket=BUCKET, Key=f"{PREFIX}/a{i}.npy", Body=path.read_bytes())
        path.unlink()
    return PREFIX


def source(s3: S3Fixture, endpoint: str, prefix: str, **kw: object) -> FileSource:
    options = {**s3.options(), "retry": FAST_RETRY, "endpoint": endpoint}
    return FileSource(
        f"s3://{BUCKET}/{prefix}/", format="npy", speculate=False, store_options=options, **kw
    )


def epoch(src: FileSource, seed: int) -> str:
    with Loader(src, batch_size=4, seed=seed, steps=FILES // 4) as loader:
        return batch_digest(loader)


def entries(cache_dir: Path) -> list[Path]:
    return [p for p in cache_dir.rglob("*") if p.is_file() and not p.name.startswith(".")]


def flip_in_place(path: Path, at: int) -> None:
    """One byte changed, the file kept (its inode, unlike a copy renamed over it)."""
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0xFF]))


def test_an_entry_changed_in_place_after_its_check_is_not_served(
    s3: S3Fixture, arrays: str, proxy: LatencyProxy, tmp_path: Path
) -> None:
    # Entries are checked at their first read in a process, then remembered by their
    # file: one written over in place (a restore, a tool, a stray write) kept its
    # (st_dev, st_ino), and the next epoch of the same run was served its new bytes.
    want = epoch(source(s3, proxy.endpoint, arrays), seed=4)
    src = source(s3, proxy.endpoint, arrays, cache_dir=tmp_path)
    epoch(src, seed=3)  # fills the cache
    epoch(src, seed=3)  # reads (and checks) every entry
    found = entries(tmp_path)
    assert len(found) == FILES
    for p in found:
        flip_in_place(p, 200)  # one byte of the array's data
    with pytest.warns(RuntimeWarning, match="checksum"):
        got = epoch(src, seed=4)
    assert got == want
    assert src.cache_stats is not None and src.cache_stats.bad_entries == FILES


def test_a_parquet_chunk_changed_in_place_mid_run_is_read_again(
    s3: S3Fixture, proxy: LatencyProxy, tmp_path: Path
) -> None:
    # The same for a table's row group entries (read by ranges): the changed chunk was
    # decoded, and the run failed with "corrupt Parquet data" naming the S3 object.
    table = pa.table({"y": np.arange(2_000, dtype=np.int64)})
    local = tmp_path / "t.parquet"
    pq.write_table(table, local, row_group_size=250)
    key = f"{PREFIX}-table/t.parquet"
    s3.server.info.boto3_client().put_object(Bucket=BUCKET, Key=key, Body=local.read_bytes())
    options = {**s3.options(), "retry": FAST_RETRY, "endpoint": proxy.endpoint}

    def source(**kw: object) -> TableSource:
        return TableSource(f"s3://{BUCKET}/{key}", window_rows=500, store_options=options, **kw)

    def run(src: TableSource, seed: int) -> str:
        with Loader(src, batch_size=50, seed=seed, steps=40) as loader:
            return batch_digest(loader)

    want = run(source(), seed=4)
    cache = tmp_path / "cache"
    src = source(cache_dir=cache)
    run(src, seed=3)
    run(src, seed=3)  # every chunk read from its entry, checked
    for p in entries(cache):
        flip_in_place(p, p.stat().st_size // 2)
    with pytest.warns(RuntimeWarning, match="checksum"):
        got = run(src, seed=4)
    assert got == want
    assert src.cache_stats is not None and src.cache_stats.bad_entries > 0


def test_an_entry_whose_fstat_fails_is_a_miss_said_by_its_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Fault injection: the fstat that now keys a checked entry (by inode and ctime) fails
    # (a cache_dir on a mount gone): a failed local read, the store's bytes instead.
    import errno

    from headrace.io import ObjectCache
    from headrace.io import _cache as cache_mod

    c = ObjectCache(tmp_path)
    data = np.arange(3000, dtype=np.uint8)
    assert c.write("s3://b/k", len(data), "e", data)
    real = cache_mod.os.fstat

    def gone(fd: int) -> os.stat_result:
        raise OSError(errno.ENOTCONN, "Transport endpoint is not connected")

    monkeypatch.setattr(cache_mod.os, "fstat", gone)
    with pytest.warns(RuntimeWarning, match=r"a local read of .* failed .*Transport endpoint"):
        assert c.read("s3://b/k", len(data), "e") is None
    assert c.stats.errors == 1 and c.stats.misses == 1
    monkeypatch.setattr(cache_mod.os, "fstat", real)
    got = c.read("s3://b/k", len(data), "e")
    assert got is not None and got.tobytes() == data.tobytes()
