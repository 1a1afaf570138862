"""A prefix whose names start below '.' (Kinetics' YouTube ids: ``-0bHW0u5JMU.mp4``),
listed in ranges cut by name on moto: the same keys as one listing."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from s3util import S3Fixture

from headrace.io import ObjectStore, _object_listing

pytestmark = pytest.mark.integration

BUCKET = "headrace-dashes"
KEYS = [f"{top}-{i:03d}.mp4" for top in ("k/", "n/-/") for i in range(60)]


@pytest.fixture(scope="module")
def bucket(s3: S3Fixture) -> Iterator[dict[str, object]]:
    s3.server.create_bucket(BUCKET)
    client = s3.server.info.boto3_client()
    for key in KEYS:
        client.put_object(Bucket=BUCKET, Key=key, Body=key.encode())
    yield s3.options()


@pytest.mark.parametrize("prefix", ["k", "n"])
def test_names_below_a_dot_are_listed_in_ranges_as_in_one(
    bucket: dict[str, object], monkeypatch: pytest.MonkeyPatch, prefix: str
) -> None:
    # A page of "-000.mp4".."-019.mp4" was cut at "k/." (and "n/-/."), which obstore
    # refuses as a listing's start: "invalid key or argument (Could not parse path ...)",
    # the whole listing failed.
    monkeypatch.setattr(_object_listing, "PAGE", 20)
    with ObjectStore(f"s3://{BUCKET}", **bucket) as store:  # type: ignore[arg-type]
        listed = store.list_info(prefix)
    want = [k for k in KEYS if k.startswith(prefix + "/")]
    assert [k for k, _ in listed] == want
    assert [i.size for _, i in listed] == [len(k) for k in want]
