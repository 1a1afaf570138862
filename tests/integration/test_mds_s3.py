"""MDSSource on S3 (moto on 127.0.0.1, behind the fault proxy where faults are asked):
the same batches as the local copy, 5xx retried, a cut shard and a short body refused
naming the object."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from s3util import BUCKET, FAST_RETRY, S3Fixture

from _mds_files import write_mds
from headrace.emulate import FaultRule, LatencyProxy
from headrace.errors import ConfigError, FormatError, ObjectNotFoundError, StorageError
from headrace.formats import MDSSource
from headrace.pipeline import Loader
from headrace.testing import assert_resume_exact, batch_digest

pytestmark = pytest.mark.integration

COLUMNS = {"id": "int", "text": "str", "x": "ndarray:float32:16", "v": "ndarray:uint16"}


def _upload(s3: S3Fixture, root: Path, prefix: str) -> str:
    client = s3.server.info.boto3_client()
    for p in sorted(root.iterdir()):
        client.put_object(Bucket=BUCKET, Key=f"{prefix}/{p.name}", Body=p.read_bytes())
    return f"s3://{BUCKET}/{prefix}"


@pytest.fixture(scope="module")
def dataset(s3: S3Fixture, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """50 samples in 5 shards, locally and under ``mds/ds`` on S3."""
    root = tmp_path_factory.mktemp("mds") / "ds"
    rng = np.random.default_rng(5)
    samples = [
        {
            "id": k,
            "text": "t" * (k % 7),
            "x": rng.standard_normal(16).astype(np.float32),
            "v": np.arange(k % 5 + 1, dtype=np.uint16),
        }
        for k in range(50)
    ]
    write_mds(root, COLUMNS, samples, per_shard=10)
    return root, _upload(s3, root, "mds/ds")


def _remote(s3: S3Fixture, url: str, endpoint: str | None = None, **kw: Any) -> MDSSource:
    options: dict[str, Any] = {**s3.options(), "retry": FAST_RETRY}
    if endpoint is not None:
        options["endpoint"] = endpoint
    return MDSSource(url, store_options=options, **kw)


def _digest(src: MDSSource) -> str:
    with Loader(src, batch_size=6, seed=2, steps=12) as loader:  # 72 samples: 2 epochs
        return batch_digest(loader)


def test_s3_batches_are_the_local_ones(s3: S3Fixture, dataset: tuple[Path, str]) -> None:
    root, url = dataset
    assert _digest(_remote(s3, url)) == _digest(MDSSource(root))
    for columns in (["x", "id"], ["v"]):
        assert _digest(_remote(s3, url, columns=columns)) == _digest(
            MDSSource(root, columns=columns)
        )
    with _remote(s3, url, columns=["id"], shuffle=False) as narrow:
        before = narrow.files.store.stats.bytes  # index.json's GET
        narrow.read(0, np.arange(10))
        # id lies after the sizes of text and v (columns in name order: id, text, v,
        # x): 8 bytes of each sample, joined into one GET of the shard's samples.
        assert narrow.stats.bytes == 10 * 8 and narrow.stats.headers == 1
        size = (root / "shard.00000.mds").stat().st_size
        assert narrow.files.store.stats.bytes - before < size
    assert_resume_exact(
        lambda: Loader(_remote(s3, url), batch_size=6, seed=2), steps=12, resume_at=[5, 9]
    )
    with _remote(s3, url) as src:  # a worker's copy: its own store, the parent's listing
        copy = pickle.loads(pickle.dumps(src))
        assert copy.files.store is not src.files.store
        assert _digest(copy) == _digest(MDSSource(root))


def test_5xx_is_retried_and_the_batches_are_the_local_ones(
    s3: S3Fixture, proxy: LatencyProxy, dataset: tuple[Path, str]
) -> None:
    root, url = dataset
    local = _digest(MDSSource(root))
    proxy.set_faults(
        [
            FaultRule(
                kind="status", status=503, match=f"GET /{BUCKET}/mds/ds/shard", every=4, limit=2
            ),
            FaultRule(kind="status", status=500, match=f"GET /{BUCKET}/mds/ds/index", limit=1),
        ]
    )
    src = _remote(s3, url, proxy.endpoint)
    assert _digest(src) == local
    assert proxy.stats.faults == 3


def _copy(s3: S3Fixture, root: Path, tmp: Path, prefix: str, cut: int, index_too: bool) -> str:
    copy = tmp / prefix
    copy.mkdir()
    for p in root.iterdir():
        (copy / p.name).write_bytes(p.read_bytes())
    shard = copy / "shard.00002.mds"
    shard.write_bytes(shard.read_bytes()[:-cut])
    if index_too:
        index = json.loads((copy / "index.json").read_text())
        index["shards"][2]["raw_data"]["bytes"] -= cut
        (copy / "index.json").write_text(json.dumps(index))
    return _upload(s3, copy, f"mds/{prefix}")


def test_a_truncated_shard_on_s3_is_refused_naming_it(
    s3: S3Fixture, dataset: tuple[Path, str], tmp_path: Path
) -> None:
    root, _ = dataset
    url = _copy(s3, root, tmp_path, "cut", 5, index_too=False)
    with pytest.raises(
        FormatError, match=r"mds/cut/shard\.00002\.mds: \d+ bytes, index\.json says"
    ):
        _remote(s3, url)
    url = _copy(s3, root, tmp_path, "cut2", 5, index_too=True)
    with _remote(s3, url, shuffle=False) as src:
        src.read(0, np.arange(20))  # shards 0 and 1 read
        with pytest.raises(FormatError, match=r"mds/cut2/shard\.00002\.mds: .*truncated"):
            src.read(0, np.arange(20, 30))


def test_a_missing_index_or_shard_on_s3(
    s3: S3Fixture, dataset: tuple[Path, str], tmp_path: Path
) -> None:
    with pytest.raises(ObjectNotFoundError, match=r"index\.json: no such object"):
        _remote(s3, f"s3://{BUCKET}/mds/nothing-here")
    root, _ = dataset
    (tmp_path / "part").mkdir()
    for name in ("index.json", "shard.00000.mds"):
        (tmp_path / "part" / name).write_bytes((root / name).read_bytes())
    url = _upload(s3, tmp_path / "part", "mds/part")
    with pytest.raises(ObjectNotFoundError, match=r"lists 4 shard\(s\) not stored there"):
        _remote(s3, url)


def test_a_body_short_every_try_is_refused_naming_the_shard(
    s3: S3Fixture, proxy: LatencyProxy, dataset: tuple[Path, str]
) -> None:
    _, url = dataset
    with _remote(s3, url, proxy.endpoint, shuffle=False) as src:
        src.read(0, np.arange(3))  # the offsets table of shard 0
        proxy.set_faults([FaultRule(kind="short", match=f"GET /{BUCKET}/mds/ds/shard.00000")])
        with pytest.raises(StorageError, match=r"mds/ds/shard\.00000\.mds, bytes \["):
            src.read(0, np.arange(3, 6))


@pytest.fixture(scope="module")
def zipped(
    s3: S3Fixture, dataset: tuple[Path, str], tmp_path_factory: pytest.TempPathFactory
) -> str:
    """The same 50 samples, zstd-compressed as MDSWriter(compression='zstd') writes them,
    under ``mds/zstd`` on S3."""
    root = tmp_path_factory.mktemp("mdsz") / "ds"
    local, _ = dataset
    with MDSSource(local, shuffle=False) as src:
        b = src.read(0, np.arange(50))
    samples = [
        {
            "id": int(b["id"][k]),
            "text": bytes(b["text"][k]).decode(),
            "x": b["x"][k],
            "v": b["v"][k],
        }
        for k in range(50)
    ]
    write_mds(root, COLUMNS, samples, per_shard=10, compression="zstd")
    return _upload(s3, root, "mds/zstd")


def test_compressed_shards_on_s3_give_the_local_uncompressed_batches(
    s3: S3Fixture, proxy: LatencyProxy, dataset: tuple[Path, str], zipped: str
) -> None:
    root, _ = dataset
    for shuffle in ("window", "full"):
        want = _digest(MDSSource(root, shuffle=shuffle, window_rows=20))
        assert _digest(_remote(s3, zipped, shuffle=shuffle, window_rows=20)) == want
    with _remote(s3, zipped, shuffle=False) as src:
        src.read(0, np.arange(50))
        assert src.stats.unzipped == 5 and src.stats.zip_bytes == sum(src.files.sizes)
    assert_resume_exact(
        lambda: Loader(_remote(s3, zipped, window_rows=20), batch_size=6, seed=2),
        steps=12,
        resume_at=[5, 9],
    )
    # The whole-shard GETs retried on 5xx.
    proxy.set_faults(
        [
            FaultRule(
                kind="status", status=503, match=f"GET /{BUCKET}/mds/zstd/shard", every=2, limit=3
            )
        ]
    )
    src = _remote(s3, zipped, proxy.endpoint, window_rows=20)
    assert _digest(src) == _digest(MDSSource(root, window_rows=20, shuffle="window"))
    assert proxy.stats.faults == 3
    with _remote(s3, zipped) as src:  # a worker's copy: no decompressed shard carried
        src.read(0, np.arange(10))
        copy = pickle.loads(pickle.dumps(src))
        assert src.cache.held() and copy.cache.held() == []
        copy.close()


def test_a_prefix_holding_decompressed_shards_too_reads_them_by_ranges(
    s3: S3Fixture, zipped: str, tmp_path: Path
) -> None:
    # A Streaming cache folder copied up (compressed shards and the decompressed files
    # beside them): the decompressed ones are read by ranged GETs, the dataset the same.
    import zstandard

    client = s3.server.info.boto3_client()
    copy = tmp_path / "both"
    copy.mkdir()
    listed = client.list_objects_v2(Bucket=BUCKET, Prefix="mds/zstd/")["Contents"]
    for key in [o["Key"] for o in listed]:
        data = client.get_object(Bucket=BUCKET, Key=key)["Body"].read()
        (copy / key.rsplit("/", 1)[1]).write_bytes(data)
    for entry in json.loads((copy / "index.json").read_text())["shards"]:
        data = (copy / entry["zip_data"]["basename"]).read_bytes()
        raw = zstandard.ZstdDecompressor().decompress(data)
        (copy / entry["raw_data"]["basename"]).write_bytes(raw)
    url = _upload(s3, copy, "mds/both")
    with _remote(s3, zipped) as z, _remote(s3, url) as both:
        assert both.fingerprint() == z.fingerprint()
        assert _digest(both) == _digest(z)
        assert both.stats.unzipped == 0 and both.stats.zip_bytes == 0


@pytest.mark.parametrize("stored", ["plain", "zstd"])
def test_cache_dir_keeps_what_is_read_and_a_rerun_reads_it_from_local_disk(
    s3: S3Fixture,
    proxy: LatencyProxy,
    dataset: tuple[Path, str],
    zipped: str,
    tmp_path: Path,
    stored: str,
) -> None:
    # Streaming's own reason to exist: the second epoch, or a restarted run, reads
    # local disk, not the store (before, MDSSource had no cache_dir).
    url = dataset[1] if stored == "plain" else zipped
    want = _digest(_remote(s3, url))
    cache = tmp_path / "cache"
    with _remote(s3, url, proxy.endpoint, cache_dir=cache) as first:
        assert _digest(first) == want
        kept = first.cache_stats
        assert kept is not None and kept.written > 0
    # The store now refuses every shard GET: the rerun reads its shards from the cache.
    prefix = url.removeprefix(f"s3://{BUCKET}/")
    proxy.set_faults([FaultRule(kind="status", status=403, match=f"GET /{BUCKET}/{prefix}/shard")])
    with _remote(s3, url, proxy.endpoint, cache_dir=cache) as again:
        assert _digest(again) == want
        read = again.cache_stats
        assert read is not None and read.hits > 0 and read.written == 0
        copy = pickle.loads(pickle.dumps(again))  # a worker's copy reads the same cache
        ids = copy.read(0, np.arange(10))["id"].tolist()
        assert ids == again.read(0, np.arange(10))["id"].tolist()
        assert copy.cache_stats is not None and copy.cache_stats.hits > 0
        copy.close()
    assert proxy.stats.faults == 0  # not one shard GET made
    # Without the cache, or with an empty one, the refusal is met, naming the shard.
    for kw in ({}, {"cache_dir": tmp_path / "empty"}):
        with pytest.raises(StorageError, match=r"shard\.0000\d\.mds"):
            _digest(_remote(s3, url, proxy.endpoint, **kw))


def test_shards_whose_blocks_were_all_read_are_joined_and_read_whole(
    s3: S3Fixture, proxy: LatencyProxy, tmp_path: Path
) -> None:
    # Shards of ~200 KB are 4 block entries each; once every block of a shard was read,
    # they are joined into the shard's whole entry, which later reads take (one entry
    # opened a read, not one a block), the store refused and never asked.
    rng = np.random.default_rng(8)
    samples = [
        {
            "id": k,
            "text": "",
            "x": rng.standard_normal(16).astype(np.float32),
            "v": rng.integers(0, 60_000, 1000).astype(np.uint16),
        }
        for k in range(400)
    ]
    root = tmp_path / "big"
    write_mds(root, COLUMNS, samples, per_shard=100)
    url = _upload(s3, root, "mds/joined")
    cache = tmp_path / "cache"

    def epoch(src: MDSSource, seed: int) -> str:
        with Loader(src, batch_size=16, seed=seed, steps=25) as loader:
            return batch_digest(loader)

    want = [epoch(MDSSource(root), seed) for seed in (1, 2, 3)]
    with _remote(s3, url, proxy.endpoint, cache_dir=cache) as first:
        # (Looked for at 4, 8, 16... block reads of a shard: by the second epoch.)
        assert epoch(first, 1) == want[0] and epoch(first, 2) == want[1]
        assert first.cache_stats is not None and first.cache_stats.joined == 4
    entries = [p for p in cache.rglob("*") if p.is_file() and p.name != ".headrace-bytes"]
    assert len(entries) == 8  # each shard's whole entry and block checksums: no block
    proxy.set_faults(
        [FaultRule(kind="status", status=403, match=f"GET /{BUCKET}/mds/joined/shard")]
    )
    with _remote(s3, url, proxy.endpoint, cache_dir=cache) as again:
        assert epoch(again, 3) == want[2]
        stats = again.cache_stats
        assert stats is not None and stats.misses == 0 and stats.hits > 0
    assert proxy.stats.faults == 0


def test_cache_dir_for_a_local_folder_is_refused(dataset: tuple[Path, str], tmp_path: Path) -> None:
    root, _ = dataset
    with pytest.raises(ConfigError, match=r"cache_dir keeps local copies .* on local disk already"):
        MDSSource(root, cache_dir=tmp_path / "cache")
    with pytest.raises(ConfigError, match=r"cache_bytes=.* needs cache_dir="):
        MDSSource(root, cache_bytes=1 << 20)


def test_cache_dir_keeps_nothing_of_shards_listed_without_an_etag(
    s3: S3Fixture, dataset: tuple[Path, str], tmp_path: Path
) -> None:
    # A store that lists no ETag (fault injection: the listing's tags dropped) gives
    # nothing to tell a replaced shard by: read from the store, counted, not kept.
    from headrace.formats._packed_names import PackedTags

    root, url = dataset
    with MDSSource(root, shuffle=False) as local:
        want = local.read(0, np.arange(50))["id"].tolist()
    with _remote(s3, url, shuffle=False, cache_dir=tmp_path / "cache") as src:
        src.files.etags = PackedTags.of([None] * len(src.files))
        assert src.read(0, np.arange(50))["id"].tolist() == want
        stats = src.cache_stats
        assert stats is not None and stats.uncacheable > 0 and stats.written == 0


def test_split_reads_the_split_prefix(s3: S3Fixture, dataset: tuple[Path, str]) -> None:
    root, _ = dataset
    url = _upload(s3, root, "mds/splits/train").rsplit("/", 1)[0]
    src = _remote(s3, url, split="train")
    assert src.root == f"{url}/train"
    assert _digest(src) == _digest(MDSSource(root))
    src.close()
    with pytest.raises(ObjectNotFoundError, match=r"index.json: no such object.*split="):
        _remote(s3, url)
