"""Image edges (s49): PNG image data that ends, whole, before its last scanline."""

from __future__ import annotations

import io
import struct
import warnings
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image, ImageFile

from _png_files import png_bytes
from headrace.errors import ConfigError, FormatError
from headrace.formats import FileSource, decode_jpeg, decode_png, encode_png
from headrace.formats._images import jpeg_layout

_RNG = np.random.default_rng(49)


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def _short_png(a: np.ndarray[Any, Any], rows: int) -> bytes:
    """A PNG whose IHDR says ``a``'s size but whose zlib stream, whole (its Adler-32 and
    every CRC-32 good), holds ``rows`` fewer scanlines (a writer stopped early)."""
    whole = png_bytes(a, {1: 0, 2: 4, 3: 2, 4: 6}[a.shape[2]])
    at = whole.index(b"IDAT") - 4
    (length,) = struct.unpack_from(">I", whole, at)
    raw = zlib.decompress(whole[at + 8 : at + 8 + length])
    line = 1 + a.shape[1] * a.shape[2] * a.dtype.itemsize
    cut = raw[: len(raw) - rows * line]
    return whole[:at] + _chunk(b"IDAT", zlib.compress(cut)) + whole[at + 12 + length :]


@pytest.mark.parametrize("decode", [decode_png, decode_jpeg])
@pytest.mark.parametrize(
    ("dtype", "channels"), [(np.uint8, 3), (np.uint8, 1), (np.uint16, 3), (np.uint16, 2)]
)
def test_image_data_that_ends_whole_before_the_last_scanline_is_refused(
    decode: Any, dtype: Any, channels: int
) -> None:
    # Pillow's inflater stops where the zlib stream ends: at a scanline's end it kept the
    # rows so far and zero-filled the rest, no error, whatever LOAD_TRUNCATED_IMAGES
    # says (fails before: decoded, the last rows zeros).
    a = _RNG.integers(1, 256, (40, 30, channels)).astype(dtype)
    for rows in (1, 20):
        with pytest.raises(FormatError, match=r"^s\.png: corrupt or truncated PNG \(image file"):
            decode(_short_png(a, rows), name="s.png")


def test_short_interlaced_image_data_is_refused_and_whole_files_still_read() -> None:
    a = _RNG.integers(1, 256, (17, 11, 3)).astype(np.uint8)
    whole = png_bytes(a, 2, interlace=True)
    at = whole.index(b"IDAT") - 4
    (length,) = struct.unpack_from(">I", whole, at)
    raw = zlib.decompress(whole[at + 8 : at + 8 + length])
    cut = raw[: -(1 + 11 * 3)]  # the last pass's last scanline gone
    short = whole[:at] + _chunk(b"IDAT", zlib.compress(cut)) + whole[at + 12 + length :]
    with pytest.raises(FormatError, match=r"^i\.png: corrupt or truncated PNG"):
        decode_png(short, name="i.png")
    for h, w in ((1, 1), (2, 1), (1, 9), (17, 11), (8, 8)):
        b = _RNG.integers(0, 256, (h, w, 3)).astype(np.uint8)
        for interlace in (False, True):
            got = decode_png(png_bytes(b, 2, interlace=interlace, filtered=True), name="ok.png")
            np.testing.assert_array_equal(got, b)


@pytest.mark.parametrize("level", [0, 1, 9])
@pytest.mark.parametrize("mode", ["1", "L", "LA", "P", "RGB", "RGBA", "I;16"])
def test_pngs_written_by_pillow_still_read_whole(mode: str, level: int) -> None:
    # The check holds back the stream's last byte (an Adler-32 byte, which no scanline
    # needs) from Pillow: every image, however it is compressed, still reads whole.
    for h, w in ((1, 1), (3, 7), (33, 65)):
        grey = _RNG.integers(0, 256, (h, w)).astype(np.uint8)
        if mode == "1":
            img = Image.fromarray(grey > 127)
        elif mode == "P":
            img = Image.fromarray(grey).convert("P")
        elif mode == "I;16":
            img = Image.fromarray(_RNG.integers(0, 65536, (h, w)).astype(np.uint16))
        else:
            bands = {"L": (), "LA": (2,), "RGB": (3,), "RGBA": (4,)}[mode]
            img = Image.fromarray(_RNG.integers(0, 256, (h, w, *bands)).astype(np.uint8), mode)
        buf = io.BytesIO()
        img.save(buf, "PNG", compress_level=level)
        ref = np.asarray(
            Image.open(io.BytesIO(buf.getvalue())).convert(
                {"1": "L", "P": "RGB"}.get(mode, img.mode)
            )
        )
        got = decode_png(buf.getvalue(), name="ok.png")
        np.testing.assert_array_equal(got.reshape(ref.shape), ref)


def test_a_short_png_in_a_folder_is_corrupt_to_on_corrupt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = _RNG.integers(1, 256, (8, 6, 3)).astype(np.uint8)
    (tmp_path / "a.png").write_bytes(png_bytes(a, 2))
    (tmp_path / "b.png").write_bytes(_short_png(a, 2))
    src = FileSource(tmp_path, format="png", shuffle="none")
    with pytest.raises(FormatError, match=r"b\.png: corrupt or truncated PNG"):
        src.read(0, np.array([1]))
    np.testing.assert_array_equal(src.read(0, np.array([0]))["image"][0], a)
    replaced = FileSource(
        tmp_path, format="png", shuffle="none", on_corrupt="replace", max_corrupt=0.5
    )
    np.testing.assert_array_equal(replaced.read(0, np.array([1]))["image"][0], a)
    # Under LOAD_TRUNCATED_IMAGES too (checked by headrace's own inflate there).
    monkeypatch.setattr(ImageFile, "LOAD_TRUNCATED_IMAGES", True)
    with pytest.raises(
        FormatError, match=r"b\.png: corrupt PNG image data: \d+ bytes of scanlines"
    ):
        src.read(0, np.array([1]))


# ---------------------------------------------------------------- a PNG's EXIF, read as a JPEG


def _png_with(
    chunks_before: bytes, chunks_after: bytes = b""
) -> tuple[bytes, np.ndarray[Any, Any]]:
    a = np.arange(6 * 4 * 3, dtype=np.uint8).reshape(6, 4, 3)
    data = png_bytes(a, 2)
    idat, iend = data.index(b"IDAT") - 4, data.index(b"IEND") - 4
    return data[:idat] + chunks_before + data[idat:iend] + chunks_after + data[iend:], a


def _tiff(orientation: int) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return exif.tobytes()[6:]  # the TIFF data, without "Exif\0\0"


_XMP = b'<x:xmpmeta><rdf:Description tiff:Orientation="8"/></x:xmpmeta>'


@pytest.mark.parametrize(
    ("before", "after"),
    [
        pytest.param(_chunk(b"eXIf", _tiff(6)), b"", id="eXIf"),
        pytest.param(b"", _chunk(b"eXIf", _tiff(6)), id="eXIf-after-IDAT"),  # Pillow reads it
        pytest.param(_chunk(b"eXIf", _tiff(3)), _chunk(b"eXIf", _tiff(5)), id="two-eXIf"),
        pytest.param(_chunk(b"eXIf", b"Exif\0\0" + _tiff(7)), b"", id="eXIf-Exif-header"),
        pytest.param(_chunk(b"iTXt", b"XML:com.adobe.xmp\0\0\0\0\0" + _XMP), b"", id="iTXt"),
        pytest.param(
            _chunk(b"iTXt", b"XML:com.adobe.xmp\0\1\0en\0\0" + zlib.compress(_XMP)),
            b"",
            id="iTXt-compressed",
        ),
        pytest.param(b"", _chunk(b"tEXt", b"XML:com.adobe.xmp\0" + _XMP), id="tEXt-after"),
        pytest.param(
            _chunk(b"eXIf", _tiff(2)),
            _chunk(b"zTXt", b"XML:com.adobe.xmp\0\0" + zlib.compress(_XMP)),
            id="eXIf-over-zTXt",
        ),
        pytest.param(_chunk(b"eXIf", _tiff(6)[:-8]), b"", id="eXIf-cut-short"),
        pytest.param(_chunk(b"tEXt", b'Comment\0tiff:Orientation="6"'), b"", id="not-XMP"),
    ],
)
@pytest.mark.parametrize("simplejpeg", [True, False])
def test_a_png_named_jpeg_turns_upright_as_pillow_turns_it(
    before: bytes, after: bytes, simplejpeg: bool
) -> None:
    # A PNG named .jpg reads as Pillow (so torchvision) reads it; with exif_transpose
    # its eXIf chunk (or XMP) was ignored: pixels as stored, where
    # PIL.ImageOps.exif_transpose turns them (fails before: 6 x 4, not 4 x 6).
    from PIL import ImageOps

    data, a = _png_with(before, after)
    with warnings.catch_warnings():  # Pillow's "Corrupt EXIF data" for one cut short
        warnings.simplefilter("ignore")
        want = np.asarray(ImageOps.exif_transpose(Image.open(io.BytesIO(data))).convert("RGB"))
    got = decode_jpeg(data, name="p.jpg", exif_transpose=True, use_simplejpeg=simplejpeg)
    np.testing.assert_array_equal(got, want)
    assert jpeg_layout(data, exif_transpose=True) == (want.shape, np.dtype(np.uint8))
    # Without exif_transpose: as stored.
    np.testing.assert_array_equal(decode_jpeg(data, name="p.jpg", use_simplejpeg=simplejpeg), a)


def test_a_folder_of_jpegs_holding_a_png_turns_it_upright(tmp_path: Path) -> None:
    data, a = _png_with(_chunk(b"eXIf", _tiff(6)))
    (tmp_path / "p.jpg").write_bytes(data)
    src = FileSource(tmp_path, format="jpeg", exif_transpose=True)
    np.testing.assert_array_equal(src.read(0, np.array([0]))["image"][0], np.rot90(a, -1))


# ---------------------------------------------------------------- encoders, APNG


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16])
@pytest.mark.parametrize("level", [10, -2, 3.5, True])
def test_a_png_compress_level_zlib_has_not_is_a_config_error(dtype: Any, level: Any) -> None:
    # Was Pillow's "codec configuration error when writing image file" (OSError), zlib's
    # "Bad compression level" (zlib.error), or a TypeError, naming neither the option
    # nor its range.
    a = np.zeros((4, 5, 3), dtype)
    with pytest.raises(ConfigError, match=rf"compress_level must be an integer in 0\.\.9.*{level}"):
        encode_png(a, compress_level=level)
    for ok in (0, 9, -1, np.int64(6)):  # -1: zlib's default
        np.testing.assert_array_equal(decode_png(encode_png(a, compress_level=ok), name="x"), a)


def test_an_apng_reads_as_its_default_image_as_every_png_decoder_reads_it() -> None:
    # An animated PNG is a PNG: libpng, Pillow and torchvision read its IDAT image (the
    # first frame, or a still shown where animation is not), and so does headrace.
    frames = [_RNG.integers(0, 256, (8, 9, 3)).astype(np.uint8) for _ in range(3)]
    for default_image in (False, True):
        buf = io.BytesIO()
        Image.fromarray(frames[0]).save(
            buf, "PNG", save_all=True, default_image=default_image,
            append_images=[Image.fromarray(f) for f in frames[1:]],
        )  # fmt: skip
        data = buf.getvalue()
        assert b"acTL" in data and b"fdAT" in data
        for decode in (decode_png, decode_jpeg):
            np.testing.assert_array_equal(decode(data, name="a.png"), frames[0])


# ---------------------------------------------------------------- progressive JPEG cut at a scan


def _jpeg(a: np.ndarray[Any, Any], **options: Any) -> bytes:
    buf = io.BytesIO()
    img = Image.fromarray(a[:, :, 0] if a.shape[2] == 1 else a, "CMYK" if a.shape[2] == 4 else None)
    img.save(buf, "JPEG", quality=90, **options)
    return buf.getvalue()


def _scan_starts(data: bytes) -> list[int]:
    """Where each SOS marker is (no ff da can occur inside entropy-coded data)."""
    starts, at = [], data.find(b"\xff\xda")
    while at >= 0:
        starts.append(at)
        at = data.find(b"\xff\xda", at + 2)
    return starts


@pytest.mark.parametrize("channels", [1, 3, 4])
@pytest.mark.parametrize("simplejpeg", [True, False])
def test_a_progressive_jpeg_cut_at_a_scan_boundary_is_refused(
    channels: int, simplejpeg: bool
) -> None:
    # Cut before one of its scans, an EOI marker appended (as "repair" tools do): libjpeg
    # decodes the scans it has, a blurred or colourless image, and warns of nothing, so
    # even simplejpeg's strict mode took it (fails before: decoded, 1,600 pixels off).
    a = _RNG.integers(0, 256, (37, 45, channels)).astype(np.uint8)
    data = _jpeg(a, progressive=True)
    starts = _scan_starts(data)
    assert len(starts) >= 6
    for at in starts[1:]:
        cut = data[:at] + b"\xff\xd9"
        with pytest.raises(FormatError, match=r"^c\.jpg: truncated progressive JPEG: .* scans"):
            decode_jpeg(cut, name="c.jpg", use_simplejpeg=simplejpeg)


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"progressive": True},
        {"progressive": True, "optimize": True},
        {"progressive": True, "restart_marker_rows": 1},
        {"progressive": True, "restart_marker_blocks": 3},
        {"progressive": True, "subsampling": 0},
        {"restart_marker_rows": 1},
    ],
)
@pytest.mark.parametrize("channels", [1, 3, 4])
def test_whole_jpegs_of_every_kind_still_read(options: dict[str, Any], channels: int) -> None:
    a = _RNG.integers(0, 256, (37, 45, channels)).astype(np.uint8)
    data = _jpeg(a, **options)
    want = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
    for tail in (b"", b"\0\0\0"):  # padding after EOI
        for simplejpeg in (True, False):
            got = decode_jpeg(data + tail, name="ok.jpg", use_simplejpeg=simplejpeg)
            np.testing.assert_array_equal(got, want)
    # Bytes between the last scan and EOI (some of ImageNet's files): still read.
    padded = data[:-2] + b"\x00\x00\xff\xd9"
    got = decode_jpeg(padded, name="ok.jpg", use_simplejpeg=False)
    assert got.shape == want.shape
