"""FileSource(cache_dir=...) against a real S3 endpoint (moto), counted through the proxy."""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from s3util import BUCKET, FAST_RETRY, S3Fixture, upload_token_file

from headrace.emulate import LatencyProxy
from headrace.errors import ConfigError, StorageError
from headrace.formats import FileSource, synthetic_arrays
from headrace.formats import write_sample_file as write
from headrace.io import ObjectCache
from headrace.pipeline import Loader
from headrace.testing import batch_digest

pytestmark = pytest.mark.integration

FILES = 8
PREFIX = "cached"
TRAILER = ObjectCache.TRAILER_BYTES  # each entry's checksum trailer


@pytest.fixture(scope="module")
def images(s3: S3Fixture, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """FILES JPEGs, local under the returned directory and as objects under ``PREFIX/``."""
    root = tmp_path_factory.mktemp("cached-jpegs")
    client = s3.server.info.boto3_client()
    for i in range(FILES):
        path = root / f"i{i:02d}.jpg"
        write("jpeg", path, synthetic_arrays("jpeg", seed=i, shape=(16, 12, 3)))
        client.put_object(Bucket=BUCKET, Key=f"{PREFIX}/{path.name}", Body=path.read_bytes())
    return root


def source(s3: S3Fixture, endpoint: str, prefix: str = PREFIX, **kw: Any) -> FileSource:
    """Without speculation, so an epoch fetches each file exactly once (countable)."""
    options = {**s3.options(), "retry": FAST_RETRY, "endpoint": endpoint}
    kw.setdefault("speculate", False)
    kw.setdefault("format", "jpeg")
    return FileSource(f"s3://{BUCKET}/{prefix}", store_options=options, **kw)


def epoch(src: FileSource, seed: int = 3) -> str:
    """One epoch (every file once), digested."""
    with Loader(src, batch_size=4, seed=seed, steps=FILES // 4) as loader:
        return batch_digest(loader)


def gets(proxy: LatencyProxy) -> int:
    """Requests the proxy passed since the last reset, less the listing's one."""
    return proxy.stats.requests - 1


def test_the_next_epoch_reads_the_cache_not_the_store(
    s3: S3Fixture, images: Path, proxy: LatencyProxy, tmp_path: Path
) -> None:
    local = epoch(FileSource(images, format="jpeg"))
    cold = source(s3, proxy.endpoint, cache_dir=tmp_path)
    assert epoch(cold) == local
    assert gets(proxy) == FILES
    assert cold.cache_stats is not None
    assert (cold.cache_stats.misses, cold.cache_stats.written) == (FILES, FILES)
    assert cold.cache_stats.written_bytes == sum(p.stat().st_size for p in images.iterdir())

    proxy.reset_stats()
    warm = source(s3, proxy.endpoint, cache_dir=tmp_path)  # a new run, same cache
    assert epoch(warm, seed=4) == epoch(FileSource(images, format="jpeg"), seed=4)
    assert gets(proxy) == 0  # the listing only
    assert warm.cache_stats is not None
    assert (warm.cache_stats.hits, warm.cache_stats.misses) == (FILES, 0)

    # A worker's copy (pickled) carries the cache and the listed ETags: it hits too.
    proxy.reset_stats()
    copy = pickle.loads(pickle.dumps(warm))
    assert epoch(copy) == local
    assert proxy.stats.requests == 0  # not even a listing
    assert copy.cache_stats is not None and copy.cache_stats.hits == FILES


def test_a_replaced_object_is_read_again_not_served_stale(
    s3: S3Fixture, proxy: LatencyProxy, tmp_path: Path
) -> None:
    client = s3.server.info.boto3_client()
    prefix = "cached-replaced"
    rng = np.random.default_rng(0)
    for i in range(FILES):
        body = rng.integers(0, 256, 1000, dtype=np.uint8).tobytes()
        client.put_object(Bucket=BUCKET, Key=f"{prefix}/r{i}.bin", Body=body)
    first = source(s3, proxy.endpoint, prefix, cache_dir=tmp_path, format="raw")
    before = epoch(first)
    # The same size, other bytes: only the ETag tells this version from the cached one.
    client.put_object(Bucket=BUCKET, Key=f"{prefix}/r3.bin", Body=bytes(1000))

    second = source(s3, proxy.endpoint, prefix, cache_dir=tmp_path, format="raw")
    after = epoch(second)
    assert after == epoch(source(s3, proxy.endpoint, prefix, format="raw")) != before
    assert second.cache_stats is not None
    assert (second.cache_stats.hits, second.cache_stats.misses) == (FILES - 1, 1)


def test_an_object_replaced_after_listing_is_refused_and_not_cached(
    s3: S3Fixture, proxy: LatencyProxy, tmp_path: Path
) -> None:
    # The listing saw one version; the GET brings another of the same size. Served, the
    # run would mix versions (a step's bytes would differ on a rerun): refused by name,
    # as token, row and table sources refuse it, and never cached under the first's name.
    client = s3.server.info.boto3_client()
    prefix = "cached-swapped"
    for i in range(FILES):
        client.put_object(Bucket=BUCKET, Key=f"{prefix}/r{i}.bin", Body=bytes([i]) * 500)
    src = source(s3, proxy.endpoint, prefix, cache_dir=tmp_path, format="raw", shuffle="none")
    client.put_object(Bucket=BUCKET, Key=f"{prefix}/r2.bin", Body=b"x" * 500)
    with Loader(src, batch_size=1, seed=3, steps=FILES, prefetch=0) as ld:
        with pytest.raises(StorageError, match=r"r2\.bin: the object changed since it was listed"):
            list(ld)
    # r0, r1, and any of r3.. the read-ahead fetched before r2's error reached the loader
    # (it fetches up to in_flight files along the plan): == 2 failed 1 run in 5 on 2 busy
    # cores. Never r2, under its listed ETag:
    assert src.cache_stats is not None and 2 <= src.cache_stats.written < FILES
    cache, r2 = src.files.cache, f"s3://{BUCKET}/{prefix}/r2.bin"
    assert cache is not None and src.files.etags[2] is not None
    assert cache.read(f"{proxy.endpoint}|{r2}", 500, src.files.etags[2]) is None
    assert cache.read(f"{proxy.endpoint}|{r2[:-6]}r0.bin", 500, src.files.etags[0]) is not None
    fresh = source(s3, proxy.endpoint, prefix, cache_dir=tmp_path, format="raw", shuffle="none")
    with Loader(fresh, batch_size=1, seed=3, steps=FILES) as ld:  # listed anew: the new r2
        got = [bytes(b["data"][0]) for b in ld]
    assert got[2] == b"x" * 500 and got[3] == bytes([3]) * 500


def test_a_damaged_entry_is_fetched_again(
    s3: S3Fixture, images: Path, proxy: LatencyProxy, tmp_path: Path
) -> None:
    cold = source(s3, proxy.endpoint, cache_dir=tmp_path)
    clean = epoch(cold)
    victim = max((p for p in tmp_path.rglob("*") if p.is_file()), key=lambda p: p.name)
    victim.write_bytes(victim.read_bytes()[:-10])  # a lost tail
    proxy.reset_stats()
    warm = source(s3, proxy.endpoint, cache_dir=tmp_path)
    with pytest.warns(RuntimeWarning, match="removed, its bytes are read from the store"):
        assert epoch(warm) == clean
    assert gets(proxy) == 1
    assert warm.cache_stats is not None
    assert (warm.cache_stats.bad_entries, warm.cache_stats.written) == (1, 1)
    assert victim.read_bytes()[:-TRAILER] in {p.read_bytes() for p in images.iterdir()}


def test_a_full_cache_keeps_what_came_first(
    s3: S3Fixture, images: Path, proxy: LatencyProxy, tmp_path: Path
) -> None:
    block = os.statvfs(tmp_path).f_frsize  # the cache counts whole blocks of disk
    sizes = sorted(-(-(p.stat().st_size + TRAILER) // block) * block for p in images.iterdir())
    budget = sizes[0] + sizes[1] + sizes[2]  # room for two or three objects
    cold = source(s3, proxy.endpoint, cache_dir=tmp_path, cache_bytes=budget)
    clean = epoch(cold)
    assert cold.cache_stats is not None
    kept = cold.cache_stats.written
    assert 2 <= kept < FILES and cold.cache_stats.full == FILES - kept
    assert cold.cache_stats.written_bytes <= budget

    proxy.reset_stats()
    warm = source(s3, proxy.endpoint, cache_dir=tmp_path, cache_bytes=budget)
    assert epoch(warm, seed=5) == epoch(FileSource(images, format="jpeg"), seed=5)
    assert warm.cache_stats is not None
    assert warm.cache_stats.hits == kept and gets(proxy) == FILES - kept
    assert epoch(source(s3, proxy.endpoint, cache_dir=tmp_path, cache_bytes=budget)) == clean


def test_an_unwritable_cache_warns_and_the_run_goes_on(
    s3: S3Fixture, images: Path, proxy: LatencyProxy, tmp_path: Path
) -> None:
    (tmp_path / "blocker").write_bytes(b"a file where the cache's directory would go")
    src = source(s3, proxy.endpoint, cache_dir=tmp_path / "blocker" / "cache")
    with pytest.warns(RuntimeWarning, match="stopped writing in this process"):
        assert epoch(src) == epoch(FileSource(images, format="jpeg"))
    assert src.cache_stats is not None
    st = src.cache_stats
    # Writes already under way when the first failed fail too (errors, 1 or more); every
    # later one is not tried (full): each miss is one or the other, none is written.
    assert st.written == 0 and st.errors >= 1 and st.errors + st.full == st.misses
    src.close()


def test_cache_dir_is_for_object_stores(images: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="on local disk already"):
        FileSource(images, format="jpeg", cache_dir=tmp_path)
    src = FileSource(images, format="jpeg")
    assert src.cache_stats is None
    src.close()


# -- ranges: token blocks and Parquet row groups ------------------------------------

TOKENS = 40_001  # uint32: 160 KB, 5 windows of 32 KiB, blocks of 8 KiB
TOKEN_KW: dict[str, Any] = {"context": 32, "window_bytes": 32 << 10, "block_bytes": 8 << 10}


@pytest.fixture(scope="module")
def token_file(s3: S3Fixture, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return upload_token_file(
        s3, tmp_path_factory.mktemp("cached-tokens"), "cached-tokens", TOKENS, 7
    )


def tokens(s3: S3Fixture, endpoint: str, **kw: Any) -> Any:
    from headrace.formats import TokenSource

    options = {**s3.options(), "retry": FAST_RETRY, "endpoint": endpoint}
    return TokenSource(
        f"s3://{BUCKET}/cached-tokens/tok.bin", store_options=options, **TOKEN_KW, **kw
    )


def token_run(src: Any, steps: int = 80) -> str:
    """80 steps of 16: a bit over one pass over the file's 1,250 samples."""
    with Loader(src, batch_size=16, seed=2, steps=steps) as loader:
        return batch_digest(loader)


def test_token_blocks_are_read_from_the_cache_next_time(
    s3: S3Fixture, token_file: Path, proxy: LatencyProxy, tmp_path: Path
) -> None:
    from headrace.formats import TokenSource

    local = token_run(TokenSource(token_file, **TOKEN_KW))
    cold = tokens(s3, proxy.endpoint, cache_dir=tmp_path)
    assert token_run(cold) == local
    assert cold.cache_stats is not None and cold.cache_stats.written == 20  # every block once
    # Every token once, and each window's one extra token (the next window's first).
    assert cold.cache_stats.written_bytes == 4 * (TOKENS + 4)

    proxy.reset_stats()
    tokens(s3, proxy.endpoint, cache_dir=tmp_path).close()
    opening = proxy.stats.requests  # the HEAD and sidecar probes: not cached
    proxy.reset_stats()
    warm = tokens(s3, proxy.endpoint, cache_dir=tmp_path)
    assert token_run(warm) == local
    assert proxy.stats.requests == opening  # no block GET
    assert warm.cache_stats is not None
    # Every block read is a hit now: the cold run's writes and its own hits (the run goes
    # on into the next epoch, whose windows read their blocks again).
    reads = cold.cache_stats.written + cold.cache_stats.hits
    assert (warm.cache_stats.hits, warm.cache_stats.written) == (reads, 0)
    copy = pickle.loads(pickle.dumps(warm))  # a worker's: its own stores, the same cache
    assert token_run(copy) == local


def test_a_damaged_block_entry_is_read_again(
    s3: S3Fixture, token_file: Path, proxy: LatencyProxy, tmp_path: Path
) -> None:
    clean = token_run(tokens(s3, proxy.endpoint, cache_dir=tmp_path))
    for p in tmp_path.rglob("*"):
        if p.is_file():
            p.write_bytes(p.read_bytes()[:100])  # every entry loses its tail
    warm = tokens(s3, proxy.endpoint, cache_dir=tmp_path)
    with pytest.warns(RuntimeWarning, match="removed, its bytes are read from the store"):
        assert token_run(warm) == clean
    assert warm.cache_stats is not None
    assert warm.cache_stats.bad_entries == warm.cache_stats.written == 20


def test_a_failed_block_read_is_an_error_and_caches_nothing(
    s3: S3Fixture, token_file: Path, proxy: LatencyProxy, tmp_path: Path
) -> None:
    from headrace.emulate import FaultRule
    from headrace.errors import PermissionDeniedError

    src = tokens(s3, proxy.endpoint, cache_dir=tmp_path)  # opening reads the file's head
    proxy.set_faults(
        [FaultRule(kind="status", status=403, match="GET /headrace-test/cached-tokens/tok.bin ")]
    )
    with pytest.raises(PermissionDeniedError, match=r"cached-tokens/tok\.bin"):
        token_run(src, steps=2)
    assert src.cache_stats is not None and src.cache_stats.written == 0
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]


def test_parquet_row_groups_are_read_from_the_cache_next_time(
    s3: S3Fixture, proxy: LatencyProxy, tmp_path: Path
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from headrace.formats import TableSource

    rng = np.random.default_rng(3)
    ids = [rng.integers(0, 1000, n).astype(np.int32) for n in rng.integers(1, 40, 1200)]
    path = tmp_path / "t.parquet"
    pq.write_table(
        pa.table({"input_ids": pa.array(ids, pa.list_(pa.int32())), "label": np.arange(1200)}),
        path,
        row_group_size=300,
    )
    s3.server.info.boto3_client().put_object(
        Bucket=BUCKET, Key="cached-tables/t.parquet", Body=path.read_bytes()
    )
    kw: dict[str, Any] = {"columns": ["input_ids", "label"], "width": 40, "window_rows": 600}
    options = {**s3.options(), "retry": FAST_RETRY, "endpoint": proxy.endpoint}
    url = f"s3://{BUCKET}/cached-tables/t.parquet"

    def run(src: TableSource) -> str:
        with Loader(src, batch_size=20, seed=1, steps=60) as loader:  # one epoch
            return batch_digest(loader)

    local = run(TableSource(path, **kw))
    cache = tmp_path / "cache"
    cold = TableSource(url, store_options=options, cache_dir=cache, **kw)
    assert run(cold) == local
    assert cold.cache_stats is not None and cold.cache_stats.written >= 4  # the row groups
    proxy.reset_stats()
    warm = TableSource(url, store_options=options, cache_dir=cache, **kw)
    opening = proxy.stats.requests  # the footer
    assert run(warm) == local
    assert proxy.stats.requests == opening
    assert warm.cache_stats is not None and warm.cache_stats.hits == cold.cache_stats.written
    with pytest.raises(ConfigError, match="on local disk already"):
        TableSource(path, cache_dir=cache, **kw)


def test_worker_processes_share_one_cache(
    s3: S3Fixture, images: Path, proxy: LatencyProxy, tmp_path: Path
) -> None:
    pytest.importorskip("torch")
    from headrace import torch as ht

    def run(workers: int) -> list[str]:
        src = source(s3, proxy.endpoint, cache_dir=tmp_path)
        ds = ht.TorchDataset(src, batch_size=4, seed=3, steps=2 * FILES // 4)  # two epochs
        with ht.HeadraceDataLoader(ds, num_workers=workers) as dl:
            return [batch_digest([{k: v.numpy() for k, v in b.items()}]) for b in dl]

    with Loader(FileSource(images, format="jpeg"), batch_size=4, seed=3, steps=4) as ld:
        want = [batch_digest([b]) for b in ld]
    assert run(2) == want  # two processes fill the cache side by side
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(files) == FILES  # each object once, no temporary left
    kept = sorted(p.read_bytes()[:-TRAILER] for p in files)
    assert kept == sorted(p.read_bytes() for p in images.iterdir())
    proxy.reset_stats()
    assert run(3) == want
    assert proxy.stats.requests == 1  # the parent's listing; the workers read the cache
