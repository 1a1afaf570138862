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
    """Shards of 16 KiB records (a header walk reads far less than the file) under
    ``root`` and as objects under ``tfrecord/``."""
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
    return FileSource(f"s3://{BUCKET}/tfrecord/train-*", store_options=options, format="tfrecord", **kw)


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
    # One LIST, then a ranged GET a record header: not the shards' 420 KB.
    assert proxy.stats.requests == 1 + src.count_stats.reads
    assert src.count_stats.reads == sum(COUNTS)
    assert proxy.stats.bytes_down < sum(src.files.sizes) // 3
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
