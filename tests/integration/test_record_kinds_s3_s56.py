"""TFRecord shards on S3 (moto on 127.0.0.1), one of them all of whose records hold the
label as a bytes_list, written by the ``tfrecord`` package: a read of that shard's
records alone (another host's share, read by ranged GETs) is refused against the first
file's first record, as local files are; ``check`` lists the shard as one line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from s3util import BUCKET, FAST_RETRY, S3Fixture

from headrace.emulate import LatencyProxy
from headrace.errors import FormatError
from headrace.formats import FileSource
from headrace.pipeline import check

tfrecord = pytest.importorskip("tfrecord", reason="pip install tfrecord (the test extra has it)")

pytestmark = pytest.mark.integration

PER = 5


@pytest.mark.parametrize("shuffle", ["files", "samples"])
def test_a_shard_of_another_kind_on_s3_is_refused_alone(
    s3: S3Fixture, tmp_path: Path, shuffle: str
) -> None:
    client = s3.server.info.boto3_client()
    prefix = f"kinds-{shuffle}"
    for k in range(2):
        path = tmp_path / f"train-{k}.tfrecord"
        writer = tfrecord.TFRecordWriter(str(path))
        for i in range(PER):
            label = (b"7", "byte") if k == 1 else (i, "int")
            writer.write({"image": (bytes([i]) * 4096, "byte"), "label": label})
        writer.close()
        client.put_object(Bucket=BUCKET, Key=f"{prefix}/{path.name}", Body=path.read_bytes())
    options = {**s3.options(), "retry": FAST_RETRY}
    url = f"s3://{BUCKET}/{prefix}"

    def source() -> FileSource:
        # Read by records under "samples" (ranged GETs of the records asked).
        return FileSource(
            url,
            store_options=options,
            format="tfrecord",
            shuffle=shuffle,
            tfrecord_ranges_above=0,
        )

    src = source()
    every = np.arange(2 * PER)
    files, _ = src.plan.locate(0, every)
    with pytest.raises(FormatError) as caught:
        src.read(0, every[files == 1])  # train-1's records alone, by their positions
    msg = str(caught.value)
    assert f"{prefix}/train-1.tfrecord: record " in msg, msg
    assert f"{prefix}/train-0.tfrecord: record 0 holds it as an int64_list" in msg, msg
    report = check(source(), batch_size=4, most=2)
    assert report.complete and [p.sample for p in report.problems] == list(range(PER, 2 * PER))


def test_the_first_record_alone_is_fetched_to_learn_the_kinds(
    s3: S3Fixture, proxy: LatencyProxy, tmp_path: Path
) -> None:
    """Read by records (shuffle="samples"), a process whose first read is of another
    shard fetches the first shard's record 0 to learn the kinds, not the whole shard
    (1 MiB here: each worker of each host downloaded it)."""
    client = s3.server.info.boto3_client()
    for k in range(2):
        path = tmp_path / f"train-{k}.tfrecord"
        writer = tfrecord.TFRecordWriter(str(path))
        for i in range(64):
            writer.write({"image": (bytes([i]) * (16 << 10), "byte"), "label": (i, "int")})
        writer.close()
        client.put_object(Bucket=BUCKET, Key=f"first/{path.name}", Body=path.read_bytes())
    options = {**s3.options(), "retry": FAST_RETRY, "endpoint": proxy.endpoint}
    src = FileSource(
        f"s3://{BUCKET}/first",
        store_options=options,
        format="tfrecord",
        shuffle="samples",
        tfrecord_ranges_above=0,
    )
    every = np.arange(128)
    files, items = src.plan.locate(0, every)
    proxy.reset_stats()
    got = src.read(0, every[files == 1][:1])  # one record of train-1
    assert got["label"].dtype == np.int64 and got["label"].shape == (1, 1)
    assert int(got["label"][0, 0]) == int(items[files == 1][0])
    assert proxy.stats.bytes_down < (1 << 20) // 2, proxy.stats.bytes_down  # not train-0 whole
