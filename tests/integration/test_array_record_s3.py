"""ArrayRecord files on S3 (moto on 127.0.0.1, through the proxy): counted by ranged GETs
of their postscripts and footers, read by chunks with the same batches as the local files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from s3util import BUCKET, FAST_RETRY, S3Fixture

from headrace.emulate import FaultRule, LatencyProxy
from headrace.formats import FileSource
from headrace.formats._tfrecord import encode_example
from headrace.pipeline import Loader
from headrace.testing import batch_digest

pytestmark = pytest.mark.integration

module = pytest.importorskip(
    "array_record.python.array_record_module",
    reason="pip install array-record (the test extra has it)",
)

COUNTS = [40, 30, 50]


@pytest.fixture(scope="module")
def local(s3: S3Fixture, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Files of 16 KiB Examples, 2 a chunk, under ``root`` and under ``array_record/``."""
    root = tmp_path_factory.mktemp("array_record")
    client = s3.server.info.boto3_client()
    for i, n in enumerate(COUNTS):
        rng = np.random.default_rng(i)
        path = root / f"train-{i}.array_record"
        writer = module.ArrayRecordWriter(str(path), "group_size:2")
        for j in range(n):
            image = rng.integers(0, 256, 16 << 10, dtype=np.uint8)
            writer.write(encode_example({"image": image, "label": np.array([j + 100 * i])}))
        writer.close()
        client.put_object(Bucket=BUCKET, Key=f"array_record/{path.name}", Body=path.read_bytes())
    return root


def on_s3(s3: S3Fixture, endpoint: str, **kw: Any) -> FileSource:
    options = {**s3.options(), "retry": FAST_RETRY, "endpoint": endpoint}
    url = f"s3://{BUCKET}/array_record"
    return FileSource(url, store_options=options, format="array_record", **kw)


def digest(src: FileSource, steps: int = 10) -> str:
    with Loader(src, batch_size=4, seed=8, steps=steps) as loader:
        return batch_digest(loader)


@pytest.mark.parametrize("shuffle", ["files", "samples"])
def test_files_on_s3_read_as_the_local_files(
    s3: S3Fixture, local: Path, proxy: LatencyProxy, shuffle: str
) -> None:
    proxy.reset_stats()
    src = on_s3(s3, proxy.endpoint, shuffle=shuffle)
    assert src.counts.tolist() == COUNTS
    assert src.count_stats is not None
    # One LIST, then the postscript and footer of each file: not the files' 2 MB.
    assert proxy.stats.requests == 1 + src.count_stats.reads <= 1 + 2 * len(COUNTS)
    assert proxy.stats.bytes_down < sum(src.files.sizes) // 10
    mine = FileSource(local, format="array_record", shuffle=shuffle)
    assert digest(src) == digest(mine)
    proxy.reset_stats()
    assert digest(src, steps=2) == digest(mine, steps=2)
    if shuffle == "samples":  # 8 records' chunks of 32 KiB (and gaps joined): not 2 MB
        assert proxy.stats.bytes_down < sum(src.files.sizes) // 4, proxy.stats
    src.close()
    mine.close()


def test_5xx_are_retried(s3: S3Fixture, local: Path, proxy: LatencyProxy) -> None:
    mine = FileSource(local, format="array_record", shuffle="samples")
    want = digest(mine)
    mine.close()
    match = f"GET /{BUCKET}/array_record/train-1"
    proxy.set_faults(
        [
            FaultRule(kind="status", status=503, match=match, every=3, limit=2),
            FaultRule(kind="status", status=500, match=match, limit=1),
        ]
    )
    proxy.reset_stats()
    src = on_s3(s3, proxy.endpoint, shuffle="samples")
    assert digest(src) == want
    assert proxy.stats.faults == 3  # each failed try retried: the same batches
    src.close()


def test_a_large_footer_is_fetched_in_one_request(
    s3: S3Fixture, proxy: LatencyProxy, tmp_path: Path
) -> None:
    # 30,000 records a chunk each: a footer of ~210 KB over four 64 KiB blocks. Its chunk
    # was read a block at a time through the count's sparse image: a GET a block, in turn
    # (7 GETs, now 3).
    path = tmp_path / "many.array_record"
    writer = module.ArrayRecordWriter(str(path), "group_size:1,uncompressed")
    for j in range(30_000):
        writer.write(b"%d" % j)
    writer.close()
    client = s3.server.info.boto3_client()
    client.put_object(Bucket=BUCKET, Key=f"many/{path.name}", Body=path.read_bytes())
    proxy.reset_stats()
    options = {**s3.options(), "retry": FAST_RETRY, "endpoint": proxy.endpoint}
    src = FileSource(
        f"s3://{BUCKET}/many", store_options=options, format="array_record", decode=False
    )
    assert src.counts.tolist() == [30_000]
    assert src.count_stats is not None
    # The last 64 KiB (the postscript), the footer's header, then its data: one GET each.
    assert src.count_stats.reads <= 3, src.count_stats
    with Loader(src, batch_size=5, seed=1, steps=2) as loader:
        for batch in loader:
            got = [bytes(b) for b in batch["bytes"]]
            assert got == [b"%d" % i for i in batch["index"].tolist()]
    src.close()
