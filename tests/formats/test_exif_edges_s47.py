"""EXIF orientation read as Pillow reads it, where the tag is written oddly (other TIFF
types, counts, repeated) or given by XMP alone: exif_transpose=True turns JPEGs and
WebPs as ``PIL.ImageOps.exif_transpose`` does, on both JPEG paths, and the layout
predicted for the batch's slots agrees."""

from __future__ import annotations

import io
import struct
import warnings
from typing import Any

import numpy as np
import pytest
from PIL import Image, ImageOps

from headrace.formats import decode_jpeg, decode_webp
from headrace.formats._exif import jpeg_orientation
from headrace.formats._images import jpeg_layout
from headrace.formats._webp import webp_layout

# Not square: a turn by 90 degrees changes the shape; no symmetry.
_PIXELS = np.random.default_rng(47).integers(0, 256, (6, 10, 3), dtype=np.uint8)


def _tiff(*entries: tuple[int, int, bytes], extra: bytes = b"") -> bytes:
    """Little-endian EXIF whose IFD0 holds orientation entries ``(type, count, value
    field)``, then ``extra`` (at byte 14 + 12 * entries), where offsets may point."""
    ifd = struct.pack("<H", len(entries))
    for kind, count, value in entries:
        ifd += struct.pack("<HHI", 0x0112, kind, count) + value.ljust(4, b"\0")
    return b"Exif\0\0II*\0" + struct.pack("<I", 8) + ifd + b"\0\0\0\0" + extra


_AFTER = struct.pack("<I", 26)  # where ``extra`` starts, for one entry
#: EXIF as written -> the orientation Pillow finds in it.
CASES: dict[str, bytes] = {
    "SSHORT": _tiff((8, 1, struct.pack("<h", 6))),
    "SLONG": _tiff((9, 1, struct.pack("<i", 8))),
    "SBYTE": _tiff((6, 1, struct.pack("<b", 5))),
    "RATIONAL 12/2": _tiff((5, 1, _AFTER), extra=struct.pack("<II", 12, 2)),
    "SRATIONAL -7/-1": _tiff((10, 1, _AFTER), extra=struct.pack("<ii", -7, -1)),
    "RATIONAL 13/2 (no turn)": _tiff((5, 1, _AFTER), extra=struct.pack("<II", 13, 2)),
    "FLOAT": _tiff((11, 1, struct.pack("<f", 6.0))),
    "DOUBLE": _tiff((12, 1, _AFTER), extra=struct.pack("<d", 3.0)),
    "BYTE (no turn)": _tiff((1, 1, b"\x06")),
    "SHORT x3 at an offset": _tiff((3, 3, _AFTER), extra=struct.pack("<HHH", 6, 1, 1)),
    "SHORT x3 past the end": _tiff((3, 3, struct.pack("<I", 999))),
    "count 0, then 6": _tiff((3, 0, b"\x03"), (3, 1, b"\x06")),
    "unknown type, then 8": _tiff((99, 1, b"\x03"), (3, 1, b"\x08")),
}


def _jpeg(exif: bytes | None = None, xmp: bytes | None = None) -> bytes:
    buf = io.BytesIO()
    options: dict[str, Any] = {"quality": 95}
    if exif is not None:
        options["exif"] = exif
    if xmp is not None:
        options["xmp"] = xmp
    Image.fromarray(_PIXELS).save(buf, "JPEG", **options)
    return buf.getvalue()


def _upright(data: bytes) -> np.ndarray[Any, Any]:
    with warnings.catch_warnings():  # Pillow warns of some of these tags
        warnings.simplefilter("ignore")
        with Image.open(io.BytesIO(data)) as img:
            return np.asarray(ImageOps.exif_transpose(img).convert("RGB"))


def _check_jpeg(data: bytes) -> None:
    want = _upright(data)
    for simplejpeg in (True, False):
        got = decode_jpeg(data, name="x.jpg", exif_transpose=True, use_simplejpeg=simplejpeg)
        assert np.array_equal(got, want)
    assert jpeg_layout(data, exif_transpose=True) == (want.shape, np.dtype(np.uint8))


@pytest.mark.filterwarnings("ignore::UserWarning")  # Pillow's, of the odd EXIF
@pytest.mark.parametrize("case", list(CASES))
def test_an_oddly_written_orientation_turns_as_pillow_turns_it(case: str) -> None:
    data = _jpeg(CASES[case])
    with Image.open(io.BytesIO(data)) as img:
        as_stored = np.asarray(img.convert("RGB"))
    turned = not np.array_equal(_upright(data), as_stored)
    assert turned == ("no turn" not in case and "past the end" not in case)
    _check_jpeg(data)


XMP = {
    "attribute": b'<x:xmpmeta><rdf:Description tiff:Orientation="6"/></x:xmpmeta>',
    "element": b"<x:xmpmeta><tiff:Orientation>8</tiff:Orientation></x:xmpmeta>",
}


@pytest.mark.parametrize("form", list(XMP))
def test_an_orientation_in_xmp_alone_turns_as_pillow_turns_it(form: str) -> None:
    data = _jpeg(xmp=XMP[form])
    assert _upright(data).shape == (10, 6, 3)
    _check_jpeg(data)
    # Where EXIF has the tag, XMP's is not read: EXIF's 3 (or 1, or a BYTE) holds.
    for exif in (_tiff((3, 1, b"\x03")), _tiff((3, 1, b"\x01")), CASES["BYTE (no turn)"]):
        _check_jpeg(_jpeg(exif, XMP[form]))


def test_a_webps_xmp_orientation_turns_it_too() -> None:
    buf = io.BytesIO()
    Image.fromarray(_PIXELS).save(buf, "WEBP", lossless=True, xmp=XMP["attribute"])
    data = buf.getvalue()
    want = _upright(data)
    assert want.shape == (10, 6, 3)
    assert np.array_equal(decode_webp(data, name="x.webp", exif_transpose=True), want)
    assert webp_layout(data, exif_transpose=True) == (want.shape, np.dtype(np.uint8))
    # And an EXIF chunk written oddly, as a JPEG's APP1.
    buf = io.BytesIO()
    Image.fromarray(_PIXELS).save(buf, "WEBP", lossless=True, exif=CASES["SSHORT"])
    data = buf.getvalue()
    assert np.array_equal(decode_webp(data, name="x.webp", exif_transpose=True), _upright(data))


@pytest.mark.filterwarnings("ignore::UserWarning")  # Pillow's, of the damaged EXIF
def test_damaged_exif_gives_pillows_orientation_or_none() -> None:
    # EXIF as a camera writes it (a SHORT orientation among other tags, some values
    # held outside their entries), bytes overwritten or cut at random: the turn read
    # from it is the one Pillow's getexif finds (an entry whose values lie past the end
    # ends Pillow's reading of IFD0; a bad TIFF header, any reading at all).
    exif = Image.Exif()
    exif[0x010F], exif[0x0110], exif[0x0112], exif[0x0131] = "Cam", "Model", 6, "sw"
    written = exif.tobytes()
    rng = np.random.default_rng(47)
    img = Image.fromarray(_PIXELS[:2, :3])
    for _ in range(100):
        damaged = bytearray(written)
        for at in rng.integers(6, len(written), rng.integers(1, 4)):
            damaged[at] = rng.integers(0, 256)
        if damaged[8:10] == b"\0+":  # BigTIFF's header, which no camera writes
            continue
        if rng.random() < 0.2:
            damaged = damaged[: rng.integers(6, len(damaged))]
        buf = io.BytesIO()
        img.save(buf, "JPEG", exif=bytes(damaged))
        data = buf.getvalue()
        with Image.open(io.BytesIO(data)) as opened:
            found = opened.getexif().get(0x0112)
        want = found if found in range(2, 9) else 1
        assert jpeg_orientation(memoryview(data)) == want, bytes(damaged).hex()
    # Some writers double the header; Pillow reads past both.
    assert jpeg_orientation(memoryview(_jpeg(b"Exif\0\0" + written))) == 6
