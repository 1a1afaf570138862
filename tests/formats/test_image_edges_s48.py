"""Image edges: encoders given images their formats cannot hold, and a forged PNG size
where Pillow is told to accept truncated images."""

from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest
from PIL import ImageFile

from headrace.errors import ConfigError, FormatError
from headrace.formats import decode_jpeg, decode_png, encode_jpeg, encode_png, encode_webp


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def _png_claiming(width: int, height: int, depth: int = 8) -> bytes:
    """A PNG whose IHDR claims ``width`` x ``height`` RGB, with 10 bytes of scanlines."""
    ihdr = struct.pack(">IIBBBBB", width, height, depth, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", ihdr)
        + _chunk(b"IDAT", zlib.compress(b"\0" * 10))
        + _chunk(b"IEND", b"")
    )


@pytest.mark.parametrize("encode", [encode_jpeg, encode_png, encode_webp])
@pytest.mark.parametrize("shape", [(0, 5, 3), (5, 0, 3), (0, 0)])
def test_an_empty_image_is_refused_by_every_encoder_naming_its_shape(
    encode: object, shape: tuple[int, ...]
) -> None:
    # Was: simplejpeg's "tj3Compress8(): Invalid argument", Pillow's "cannot write empty
    # image", libwebp's MemoryError "can't allocate picture frame".
    with pytest.raises(ConfigError, match=rf"empty image.*{shape[0]} x {shape[1]}"):
        encode(np.zeros(shape, np.uint8))  # type: ignore[operator]


@pytest.mark.parametrize(
    ("encode", "shape", "limit"),
    [(encode_webp, (1, 16384, 3), "16,383"), (encode_jpeg, (65501, 1), "65,500")],
)
def test_an_image_over_its_formats_size_limit_is_refused_saying_the_limit(
    encode: object, shape: tuple[int, ...], limit: str
) -> None:
    # Was a ValueError from libwebp's or libjpeg's encoder.
    with pytest.raises(ConfigError, match=rf"{shape[0]} x {shape[1]}.*at most {limit}"):
        encode(np.zeros(shape, np.uint8))  # type: ignore[operator]
    # At the limit itself, encoded.
    at = tuple(min(s, int(limit.replace(",", ""))) for s in shape)
    assert len(encode(np.zeros(at, np.uint8)))  # type: ignore[operator]


@pytest.mark.parametrize("depth", [8, 16])
@pytest.mark.parametrize("decode", [decode_png, decode_jpeg])
def test_a_forged_png_size_is_a_bomb_under_load_truncated_images_too(
    monkeypatch: pytest.MonkeyPatch, decode: object, depth: int
) -> None:
    # Where training scripts set LOAD_TRUNCATED_IMAGES, the image data was inflated and
    # checked against IHDR's size first: a forged size read as "corrupt PNG image data:
    # 10 bytes of scanlines, its IHDR says 13835058044544745474", and a real bomb was
    # inflated whole (gigabytes) before the size was refused.
    data = _png_claiming(2**31 - 1, 2**31 - 1, depth)
    for truncated in (False, True):
        monkeypatch.setattr(ImageFile, "LOAD_TRUNCATED_IMAGES", truncated)
        with pytest.raises(
            FormatError, match=r"^b\.png: PNG of 2147483647 x 2147483647 = .*-bomb limit"
        ):
            decode(data, name="b.png")  # type: ignore[operator]


@pytest.mark.parametrize("decode", [decode_png, decode_jpeg])
def test_a_png_header_whose_crc_does_not_match_says_so(decode: object) -> None:
    # Pillow checks IHDR's CRC-32 and says which chunk failed; that reason was replaced
    # with "no image header found", as for bytes of no image at all.
    good = _png_claiming(3, 2)
    damaged = bytearray(good)
    damaged[29] ^= 0x01  # IHDR's CRC-32
    with pytest.raises(
        FormatError, match=r"^h\.png: corrupt or truncated PNG \(.*bad header checksum in b'IHDR'"
    ):
        decode(bytes(damaged), name="h.png")  # type: ignore[operator]


def _palette_png(pre_idat: bytes) -> bytes:
    indices = np.array([[0, 1, 2], [2, 1, 0]], np.uint8)
    raw = b"".join(b"\0" + row.tobytes() for row in indices)
    ihdr = struct.pack(">IIBBBBB", 3, 2, 8, 3, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", ihdr)
        + pre_idat
        + _chunk(b"IDAT", zlib.compress(raw))
        + _chunk(b"IEND", b"")
    )


@pytest.mark.parametrize("decode", [decode_png, decode_jpeg])
def test_a_palette_png_without_its_palette_is_refused(decode: object) -> None:
    # Pillow gave a palette of its own (grey) for a PLTE chunk missing, and decoded
    # colours the file never held; libpng refuses such a file ("Missing PLTE before IDAT").
    with pytest.raises(FormatError, match=r"^p\.png: corrupt PNG: a palette image .* no PLTE"):
        decode(_palette_png(b""), name="p.png")  # type: ignore[operator]
    plte = _chunk(b"PLTE", bytes(range(9)))
    got = decode(_palette_png(plte), name="p.png")  # type: ignore[operator]
    assert got[0, 2].tolist() == [6, 7, 8]


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ((0, 2, 8, 2, 0, 0, 0), r"width 0"),
        ((3, 0, 8, 2, 0, 0, 0), r"height 0"),
        ((3, 2, 3, 2, 0, 0, 0), r"bit depth 3 for colour type 2 \(RGB\), which allows 8, 16"),
        ((3, 2, 16, 3, 0, 0, 0), r"bit depth 16 for colour type 3 \(palette\)"),
        ((3, 2, 8, 5, 0, 0, 0), r"colour type 5, not one of 0, 2, 3, 4, 6"),
        ((3, 2, 8, 2, 1, 0, 0), r"compression method 1"),
        ((3, 2, 8, 2, 0, 1, 0), r"filter method 1"),
        ((3, 2, 8, 2, 0, 0, 2), r"interlace method 2"),
    ],
)
def test_a_png_header_of_values_no_png_has_names_the_field(
    fields: tuple[int, ...], match: str
) -> None:
    # Was "no image header found" (Pillow's "not identified by this driver"), or for a
    # compression method "image file is truncated".
    data = (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", struct.pack(">IIBBBBB", *fields))
        + _chunk(b"IDAT", zlib.compress(b"\0" * 20))
        + _chunk(b"IEND", b"")
    )
    for decode in (decode_png, decode_jpeg):
        with pytest.raises(FormatError, match=rf"^h\.png: corrupt PNG: its IHDR says {match}"):
            decode(data, name="h.png")  # type: ignore[operator]
