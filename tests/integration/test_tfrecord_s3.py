"""TFRecord shards on S3 (moto on 127.0.0.1, through the proxy): counted by ranged GETs
of their record headers, read with the same batches as the local files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from s3util import BUCKET, FAST_RETRY, S3Fixture

from headrace.emulate import FaultRule, LatencyProxy
from headrace.errors import PermissionDeniedError
from headrace.formats import FileSource
from headrace.formats._tfrecord import encode_tfrecord
from headrace.pipeline import Loader
from headrace.testing import batch_digest

pytestmark = pytest.mark.integration

COUNTS = [6, 7, 8, 5]


@pytest.fixture(scope="module")
def local(s3: S3Fixture, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Shards of 16 KiB records (a GET a header walked, 4 KiB, would read a quarter of
    the file) under ``root`` and as objects under ``tfrecord/``."""
    root = tmp_path_factory.mktemp("tfrecord")
    client = s3.server.info.boto3_client()
    for i, n in enumerate(COUNTS):
        rng = np.random.default_rng(i)
        arrays = {
            "image": rng.integers(0, 256, (n, 16 << 10), dtype=np.uint8),
            "label": rng.integers(0, 1000, (n, 1)),
        }
        path = root / f"train-{i:05d}-of-{len(COUNTS):05d}"
        path.write_bytes(encode_tfrecord(arrays))
        client.put_object(Bucket=BUCKET, Key=f"tfrecord/{path.name}", Body=path.read_bytes())
    return root


def on_s3(s3: S3Fixture, endpoint: str, **kw: Any) -> FileSource:
    options = {**s3.options(), "retry": FAST_RETRY, "endpoint": endpoint}
    url = f"s3://{BUCKET}/tfrecord/train-*"  # names without an extension: a glob
    return FileSource(url, store_options=options, format="tfrecord", **kw)


def digest(src: FileSource) -> str:
    with Loader(src, batch_size=4, seed=8, steps=10) as loader:
        return batch_digest(loader)


@pytest.mark.parametrize("shuffle", ["files", "samples"])
def test_shards_on_s3_read_as_the_local_files(
    s3: S3Fixture, local: Path, proxy: LatencyProxy, shuffle: str
) -> None:
    proxy.reset_stats()
    src = on_s3(s3, proxy.endpoint, shuffle=shuffle)
    assert src.counts.tolist() == COUNTS
    assert src.count_stats is not None
    # One LIST, then ranged GETs of the record headers, each twice the last (4 KiB,
    # 8, 16...): fewer than a GET a record, and no byte fetched twice.
    assert proxy.stats.requests == 1 + src.count_stats.reads
    assert src.count_stats.reads < sum(COUNTS)
    assert src.count_stats.bytes <= sum(src.files.sizes)
    here = sorted(str(p) for p in local.iterdir())
    mine = FileSource(here, format="tfrecord", shuffle=shuffle)
    assert digest(src) == digest(mine)
    assert src.fingerprint() == mine.fingerprint()
    src.close()
    mine.close()


def test_a_denied_read_names_the_object(s3: S3Fixture, local: Path, proxy: LatencyProxy) -> None:
    proxy.set_faults(
        [FaultRule(kind="status", status=403, match="GET /headrace-test/tfrecord/train-00002")]
    )
    with pytest.raises(PermissionDeniedError, match=r"tfrecord/train-00002-of-00004"):
        on_s3(s3, proxy.endpoint)


def test_reads_by_records_fetch_less_than_the_shards(
    s3: S3Fixture, tmp_path: Path, proxy: LatencyProxy
) -> None:
    client = s3.server.info.boto3_client()
    rng = np.random.default_rng(7)
    for i in range(2):  # 16 records of 256 KiB a shard
        arrays = {"image": rng.integers(0, 256, (16, 256 << 10), dtype=np.uint8)}
        client.put_object(
            Bucket=BUCKET, Key=f"tfrecord-big/s{i}.tfrecord", Body=encode_tfrecord(arrays)
        )
    options = {**s3.options(), "retry": FAST_RETRY, "endpoint": proxy.endpoint}
    url = f"s3://{BUCKET}/tfrecord-big"
    opts: dict[str, Any] = {"format": "tfrecord", "shuffle": "samples"}
    whole = FileSource(url, store_options=options, tfrecord_ranges_above=None, **opts)
    ranged = FileSource(url, store_options=options, tfrecord_ranges_above=0, **opts)
    got = []
    for src in (whole, ranged):
        proxy.reset_stats()
        with Loader(src, batch_size=4, seed=2, steps=3) as loader:
            got.append((batch_digest(loader), proxy.stats.bytes_down, proxy.stats.requests))
        src.close()
    assert got[0][0] == got[1][0]
    # 12 records of 256 KiB, not 8 MiB shards at each visit; a GET a record at most
    # (neighbours joined): the index is the count's walk, not walked again.
    assert got[1][1] < got[0][1] // 2, got
    assert got[1][2] <= 12, got
