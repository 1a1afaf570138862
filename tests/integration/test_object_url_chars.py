"""Prefixes whose names hold '#', '?' or '%' on S3 (moto), GCS (fake-gcs-server) and Azure
(Azurite): an object store's key is the URL's path as written.

Before 2026-12-03 ``urlsplit`` cut ``s3://b/h#1/`` at the '#' (a fragment) and
``s3://b/q?x/`` at the '?' (a query), and obstore's ``from_url`` decoded
``gs://b/pct%41/`` to ``pctA/``: each listed another prefix. Beside each prefix here is
the one it was read as, holding other values, so reading it shows in the values.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pytest
from s3util import S3Fixture

from headrace.formats import FileSource
from headrace.io import ObjectStore

pytestmark = pytest.mark.integration

# The prefix as named -> the one it was read as before.
PREFIXES = {"h#1": "h", "q?x": "q", "pct%41": "pctA"}
MINE, OTHER = 7, 1


def _npy(v: int) -> bytes:
    out = io.BytesIO()
    np.save(out, np.full(3, v))
    return out.getvalue()


@pytest.fixture(params=["s3", "gs", "az"])
def where(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    """The root URL of a layout of its own, and the store's options."""
    top = "urlchars"
    if request.param == "s3":
        s3: S3Fixture = request.getfixturevalue("s3")
        client = s3.server.info.boto3_client()
        put = lambda k, b: client.put_object(Bucket="headrace-test", Key=k, Body=b)  # noqa: E731
        root, opts = f"s3://headrace-test/{top}", {**s3.options()}
    else:
        cloud = request.getfixturevalue("azurite" if request.param == "az" else "fake_gcs")
        put, root, opts = cloud.put, cloud.url(prefix=top), cloud.options()
    for name, cut in PREFIXES.items():
        put(f"{top}/{name}/a.npy", _npy(MINE))
        put(f"{top}/{cut}/a.npy", _npy(OTHER))
    return root, opts


@pytest.mark.parametrize("name", list(PREFIXES))
def test_a_prefix_is_read_as_written(where: tuple[str, dict[str, Any]], name: str) -> None:
    root, opts = where
    url = f"{root}/{name}/"
    src = FileSource(url, format="npy", store_options=opts)
    try:
        assert src.files.keys == ["a.npy"]
        got = src.read(0, np.arange(1))["data"]
    finally:
        src.close()
    assert got.ravel().tolist() == [MINE] * 3, f"{url} read another prefix's object"
    with ObjectStore(url, **opts) as store:
        assert [k for k, _ in store.list_info()] == ["a.npy"]
        assert store.url == url.rstrip("/")
