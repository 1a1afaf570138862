"""Two messages that said what was not so: a BMP, TIFF or PPM file named ``.jpg`` read
with ``format="jpeg"`` was told to be re-encoded, though ``format="image"`` reads it;
an object deleted between its listing and its opening was said to have been "there
when opened"."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from _bucket import bucket_fixture
from headrace.errors import FormatError, ObjectNotFoundError
from headrace.formats import FileSource, TableSource
from headrace.io import RetryPolicy

BUCKET = "messages-s54"


@pytest.mark.parametrize("fmt", ["BMP", "TIFF", "PPM"])
def test_a_pillow_format_named_jpg_is_told_to_use_format_image(tmp_path: Path, fmt: str) -> None:
    pixels = np.random.default_rng(54).integers(0, 256, (6, 8, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, fmt)
    (tmp_path / "a.jpg").write_bytes(buf.getvalue())
    src = FileSource(tmp_path, format="jpeg", shuffle=False)
    with pytest.raises(
        FormatError,
        match=rf"a\.jpg: not a JPEG \(nor a PNG\): starts with .*; it is a {fmt} image, "
        r"which FileSource reads with format='image': pass format='image', or re-encode it",
    ):
        src.read(0, np.arange(1))
    src.close()
    # What the message says to do reads it, every pixel.
    with FileSource(tmp_path, format="image", shuffle=False) as src:
        assert np.array_equal(src.read(0, np.arange(1))["image"][0], pixels)


s3 = bucket_fixture(BUCKET)


def test_an_object_deleted_after_listing_is_not_said_opened(
    s3: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from headrace.formats import _table_remote

    client = s3.info.boto3_client()
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table({"x": np.arange(50)}), sink)
    body = sink.getvalue().to_pybytes()
    for name in ("d0.parquet", "d1.parquet"):
        client.put_object(Bucket=BUCKET, Key=f"t/{name}", Body=body)
    etag = client.head_object(Bucket=BUCKET, Key="t/d1.parquet")["ETag"].strip('"')
    opened = _table_remote.RemoteParquet.open_all.__func__  # type: ignore[attr-defined]

    def open_all(cls: Any, *args: Any) -> Any:  # fault injection: gone after the listing
        client.delete_object(Bucket=BUCKET, Key="t/d1.parquet")
        return opened(cls, *args)

    monkeypatch.setattr(_table_remote.RemoteParquet, "open_all", classmethod(open_all))
    options = {**s3.info.store_options(), "retry": RetryPolicy(attempts=2, base_delay_s=0.01)}
    with pytest.raises(ObjectNotFoundError) as caught:
        TableSource(f"s3://{BUCKET}/t/", store_options=options)
    said = str(caught.value)
    assert f"s3://{BUCKET}/t/d1.parquet, bytes [0, {len(body)})" in said, said
    listed = f"it was there when listed or opened ({len(body)} bytes, ETag {etag})"
    assert f"no such object now; {listed}" in said, said
    assert "there when opened" not in said
