"""Images from S3 (moto on 127.0.0.1) judged as local files are: a PNG whose image data
ends, whole, before its last scanline is corrupt; a PNG named .jpg turns upright by
its eXIf chunk."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from s3util import BUCKET, FAST_RETRY, S3Fixture

from _png_files import png_bytes
from headrace.errors import FormatError
from headrace.formats import FileSource

pytestmark = pytest.mark.integration


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def _with_idat(data: bytes, raw: bytes) -> bytes:
    at = data.index(b"IDAT") - 4
    (length,) = struct.unpack_from(">I", data, at)
    return data[:at] + _chunk(b"IDAT", zlib.compress(raw)) + data[at + 12 + length :]


def test_short_png_image_data_and_a_png_named_jpeg_read_as_local_files(
    s3: S3Fixture, tmp_path: Path
) -> None:
    a = np.random.default_rng(0).integers(1, 256, (8, 6, 3), dtype=np.uint8)
    good = png_bytes(a, 2)
    at = good.index(b"IDAT") - 4
    (length,) = struct.unpack_from(">I", good, at)
    raw = zlib.decompress(good[at + 8 : at + 8 + length])
    short = _with_idat(good, raw[: -2 * (1 + 6 * 3)])  # two scanlines fewer, CRCs good
    exif = Image.Exif()
    exif[0x0112] = 6
    idat = good.index(b"IDAT") - 4
    turned = good[:idat] + _chunk(b"eXIf", exif.tobytes()[6:]) + good[idat:]
    client = s3.server.info.boto3_client()
    files = {"png/a.png": good, "png/b.png": short, "jpg/p.jpg": turned}
    for key, body in files.items():
        client.put_object(Bucket=BUCKET, Key=f"s49-images/{key}", Body=body)
        (tmp_path / key).parent.mkdir(exist_ok=True)
        (tmp_path / key).write_bytes(body)
    remote = {"store_options": {**s3.options(), "retry": FAST_RETRY}}
    for root, opts in ((f"s3://{BUCKET}/s49-images/png", remote), (tmp_path / "png", {})):
        src = FileSource(root, format="png", shuffle="none", **opts)
        with pytest.raises(FormatError, match=r"b\.png: corrupt or truncated PNG"):
            src.read(0, np.array([1]))
        np.testing.assert_array_equal(src.read(0, np.array([0]))["image"][0], a)
        src.close()
        replaced = FileSource(
            root, format="png", shuffle="none", on_corrupt="replace", max_corrupt=0.5, **opts
        )
        np.testing.assert_array_equal(replaced.read(0, np.array([1]))["image"][0], a)
        replaced.close()
    for root, opts in ((f"s3://{BUCKET}/s49-images/jpg", remote), (tmp_path / "jpg", {})):
        src = FileSource(root, format="jpeg", exif_transpose=True, **opts)
        np.testing.assert_array_equal(src.read(0, np.array([0]))["image"][0], np.rot90(a, -1))
        src.close()
