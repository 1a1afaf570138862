"""JPEG edges: a JPEG of another sample precision than 8 bits (12-bit medical and
scientific images), which neither decoder reads, is named as such on both paths,
not as a damaged file to copy again."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from headrace.errors import FormatError
from headrace.formats import decode_jpeg


def _with_precision(data: bytes, bits: int) -> bytes:
    """``data`` (a baseline JPEG) with its SOF0 segment's sample precision set to ``bits``."""
    at = data.index(b"\xff\xc0")
    out = bytearray(data)
    out[at + 4] = bits
    return bytes(out)


@pytest.mark.parametrize("simplejpeg", [True, False], ids=["simplejpeg", "pillow"])
@pytest.mark.parametrize("bits", [12, 16])
def test_a_jpeg_of_other_precision_is_named_on_both_paths(bits: int, simplejpeg: bool) -> None:
    buf = io.BytesIO()
    pixels = np.random.default_rng(47).integers(0, 256, (8, 8, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(buf, "JPEG")
    data = _with_precision(buf.getvalue(), bits)
    with pytest.raises(FormatError, match=rf"^ct\.jpg: a {bits}-bit JPEG \(SOF0\).*8-bit") as err:
        decode_jpeg(data, name="ct.jpg", use_simplejpeg=simplejpeg)
    assert "copy the file again" not in str(err.value)


def test_a_jpeg_cut_and_padded_with_zeros_is_named_with_its_zero_tail() -> None:
    # A download that stopped in a preallocated file (torrent clients, aria2): the
    # rest is zero bytes. Stepping back over them a byte at a time in Python took
    # 3.6 s for 8 MiB, holding the GIL, for each such file.
    buf = io.BytesIO()
    Image.fromarray(np.zeros((16, 16, 3), np.uint8)).save(buf, "JPEG")
    data = buf.getvalue()
    cut = data[: len(data) // 2]
    padded = cut + bytes(4 << 20)
    with pytest.raises(
        FormatError,
        match=rf"^z\.jpg: truncated JPEG: no EOI marker ff d9 at the end \(last bytes "
        rf"{cut[-4:].hex(' ')}, then 4,194,304 zero bytes, {len(padded)} bytes\)",
    ):
        decode_jpeg(padded, name="z.jpg")
    # A few zero bytes after EOI are padding, as writers add.
    assert decode_jpeg(data + bytes(5), name="z.jpg").shape == (16, 16, 3)


def test_a_precision_no_jpeg_has_is_damage_as_before() -> None:
    buf = io.BytesIO()
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(buf, "JPEG")
    with pytest.raises(FormatError, match=r"^ct\.jpg: corrupt JPEG .*copy the file again"):
        decode_jpeg(_with_precision(buf.getvalue(), 0x48), name="ct.jpg")
