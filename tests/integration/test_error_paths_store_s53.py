"""Error paths of code added 2026-12-07 that talks to an object store, on moto through
the fault proxy (``headrace.emulate.LatencyProxy``): an object glob's listing that fails
with a 5xx (``_file_list_objects._glob_matches``, which now also counts the objects its
extension misses by case) is retried, or named as the store's failure, never taken for
"no objects match" nor a count of case misses; a tar shard lacking a field asked
(``_tar.check_fields``) is refused when counted on S3 too, a 5xx on its counting read
retried, and under ``on_corrupt="replace"`` opens and is read with the sample replaced.
"""

from __future__ import annotations

import io
import logging
import tarfile
from collections.abc import Iterator

import numpy as np
import pytest
from s3util import S3Fixture, store_options

from headrace.emulate import FaultRule, LatencyProxy
from headrace.errors import DataError, ObjectNotFoundError, StorageError
from headrace.formats import FileSource, encode
from headrace.io import RetryPolicy
from headrace.pipeline import Loader

pytestmark = pytest.mark.integration

BUCKET = "headrace-error-paths-s53"


def _tar(per: int, uncaptioned: tuple[int, ...], shard: int) -> bytes:
    out = io.BytesIO()
    rng = np.random.default_rng(shard)
    with tarfile.open(fileobj=out, mode="w") as tar:
        for i in range(per):
            key = f"{shard:05d}{i:04d}"
            members = {"jpg": encode("jpeg", rng.integers(0, 256, (8, 8, 3), dtype=np.uint8))}
            if i not in uncaptioned:
                members["txt"] = f"photo {shard} {i}".encode()
            for field, data in members.items():
                info = tarfile.TarInfo(f"{key}.{field}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


@pytest.fixture(scope="module")
def bucket(s3: S3Fixture) -> Iterator[None]:
    s3.server.create_bucket(BUCKET)
    client = s3.server.info.boto3_client()
    for key in ("img/a/0.jpg", "img/a/1.JPG", "img/b/0.jpg"):
        client.put_object(Bucket=BUCKET, Key=key, Body=encode("jpeg", np.zeros((4, 4, 3), "u1")))
    for s in range(2):
        client.put_object(Bucket=BUCKET, Key=f"whole/{s:05d}.tar", Body=_tar(4, (), s))
    client.put_object(Bucket=BUCKET, Key="gaps/00000.tar", Body=_tar(4, (), 0))
    client.put_object(Bucket=BUCKET, Key="gaps/00001.tar", Body=_tar(4, (1, 3), 1))
    yield


LIST = f"/{BUCKET}?"  # (a LIST's request line; a GET's is /bucket/key)


def _glob(proxy: LatencyProxy, s3: S3Fixture, caplog: pytest.LogCaptureFixture) -> FileSource:
    with caplog.at_level(logging.WARNING, logger="headrace"):
        return FileSource(
            f"s3://{BUCKET}/img/*/*.jpg",
            format="jpeg",
            store_options=store_options(s3, proxy.endpoint),
        )


def test_a_glob_listing_met_by_one_5xx_is_retried_and_counts_its_case_misses(
    bucket: None, s3: S3Fixture, proxy: LatencyProxy, caplog: pytest.LogCaptureFixture
) -> None:
    proxy.set_faults([FaultRule(kind="status", status=503, match=LIST, limit=1)])
    src = _glob(proxy, s3, caplog)
    try:
        assert proxy.stats.faults == 1
        assert sorted(src.files.keys) == ["a/0.jpg", "b/0.jpg"]
        said = [r.getMessage() for r in caplog.records if "only by the case" in r.getMessage()]
        assert len(said) == 1 and "left out 1 file(s)" in said[0] and "a/1.JPG" in said[0]
    finally:
        src.close()


@pytest.mark.parametrize("status", [500, 503])
def test_a_glob_listing_that_keeps_failing_is_the_stores_failure(
    bucket: None,
    s3: S3Fixture,
    proxy: LatencyProxy,
    caplog: pytest.LogCaptureFixture,
    status: int,
) -> None:
    proxy.set_faults([FaultRule(kind="status", status=status, match=LIST)])
    with pytest.raises(StorageError) as raised:
        _glob(proxy, s3, caplog)
    assert not isinstance(raised.value, ObjectNotFoundError)  # not "no objects match"
    assert BUCKET in str(raised.value)
    assert not [r for r in caplog.records if "only by the case" in r.getMessage()]


def test_a_glob_listing_that_stalls_times_out_as_the_stores_failure(
    bucket: None, s3: S3Fixture, proxy: LatencyProxy
) -> None:
    proxy.set_faults([FaultRule(kind="stall", stall_s=3.0, match=LIST)])
    quick = RetryPolicy(attempts=2, base_delay_s=0.01, max_delay_s=0.05, timeout_s=0.3)
    with pytest.raises(StorageError) as raised:
        FileSource(
            f"s3://{BUCKET}/img/*/*.jpg",
            format="jpeg",
            store_options={**store_options(s3, proxy.endpoint), "retry": quick},
        )
    assert not isinstance(raised.value, ObjectNotFoundError)
    assert f"s3://{BUCKET}/img/" in str(raised.value)


def test_a_list_of_globs_whose_listing_fails_is_the_stores_failure(
    bucket: None, s3: S3Fixture, proxy: LatencyProxy
) -> None:
    proxy.set_faults([FaultRule(kind="status", status=503, match=LIST)])
    with pytest.raises(StorageError) as raised:
        FileSource(
            [f"s3://{BUCKET}/img/a/*.jpg", f"s3://{BUCKET}/img/b/*.jpg"],
            format="jpeg",
            store_options=store_options(s3, proxy.endpoint),
        )
    assert not isinstance(raised.value, ObjectNotFoundError)
    assert BUCKET in str(raised.value)


def test_a_shard_lacking_a_field_is_refused_when_counted_on_s3_a_5xx_retried(
    bucket: None, s3: S3Fixture, proxy: LatencyProxy
) -> None:
    # The counting GET of the shard met by a 503 once: retried, then refused as locally.
    proxy.set_faults([FaultRule(kind="status", status=503, match="gaps/00001.tar", limit=1)])
    url = f"s3://{BUCKET}/gaps/00001.tar"
    with pytest.raises(DataError, match=r"no field 'txt'.*\(2 of the shard's 4 samples lack"):
        FileSource(
            [f"s3://{BUCKET}/gaps/00000.tar", url],
            format="tar",
            datasets=["jpg", "txt"],
            samples_per_file="header",
            store_options=store_options(s3, proxy.endpoint),
        )
    assert proxy.stats.faults == 1


def _replaced(s3: S3Fixture, proxy: LatencyProxy) -> tuple[FileSource, list[str]]:
    src = FileSource(
        f"s3://{BUCKET}/gaps/*.tar",
        format="tar",
        datasets=["jpg", "txt"],
        samples_per_file="header",
        on_corrupt="replace",
        max_corrupt=0.5,
        store_options=store_options(s3, proxy.endpoint),
    )
    with Loader(src, batch_size=4, seed=3, steps=2) as loader:  # an epoch
        captions = [bytes(t).decode() for b in loader for t in b["txt"]]
    src.close()
    return src, captions


def test_under_replace_a_shard_lacking_a_field_on_s3_opens_and_is_named(
    bucket: None, s3: S3Fixture, proxy: LatencyProxy
) -> None:
    src, captions = _replaced(s3, proxy)
    assert len(captions) == 8 and all(c.startswith("photo ") for c in captions)
    # Counted whole and named at open, its two samples without a caption replaced when
    # read (until session 54 the shard was left out at open: counted 0, nothing replaced).
    assert src.counts.tolist() == [4, 4] and src.replaced_samples == 2
    assert list(src.corrupt_files) == [f"s3://{BUCKET}/gaps/00001.tar"]
    assert "sample '000010001' (offset 2560) has no field 'txt'" in next(
        iter(src.corrupt_files.values())
    )
