"""Object stores on S3 (moto on 127.0.0.1), bug hunt s48: what put_file says it wrote."""

from __future__ import annotations

from pathlib import Path

import pytest
from s3util import BUCKET, StoreFactory

pytestmark = pytest.mark.integration


def test_put_file_gives_the_etag_as_stat_and_listings_give_it(
    open_store: StoreFactory, tmp_path: Path
) -> None:
    # put_file's ObjectInfo kept the ETag header's quotes ('"3985..."') where stat(), GETs
    # and listings give it bare, as ObjectInfo says: the version just written compared
    # unequal to itself.
    # Not under the session's shared prefix (data/), whose listing other tests compare.
    store = open_store(url=f"s3://{BUCKET}/s48-put")
    path = tmp_path / "f.bin"
    path.write_bytes(b"x" * 1000)
    put = store.put_file("s48/put.bin", path)
    assert put == store.stat("s48/put.bin")
    assert [("s48/put.bin", put)] == store.list_info("s48/")
    assert put.etag is not None and '"' not in put.etag
