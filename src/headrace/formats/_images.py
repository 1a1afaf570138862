"""JPEG and PNG: strict decoding to ``HxWxC`` uint8 arrays (WebP: :mod:`._webp`).

Sample schema
-------------
* JPEG: ``(H, W, 3)`` ``uint8`` RGB; greyscale and CMYK files are converted,
  and so is a PNG named as a JPEG (read by its bytes, as Pillow reads it).
* PNG: ``(H, W, C)``, ``C`` = 1 (grey), 2 (grey + alpha), 3 (RGB) or 4 (RGBA);
  grey keeps its single channel as ``(H, W, 1)``. Palette images expand to
  RGB or RGBA, 1-bit images to grey. ``uint8``, except 16-bit files (every
  colour type), which stay ``uint16``: Pillow reduces 16-bit colour, and 16-bit
  grey + alpha, to their high bytes, so those are decoded with Pillow's own
  inflate and unfilter under raw modes that keep every byte (:func:`_png16`).
* ``mode`` (``"L"``, ``"LA"``, ``"RGB"``, ``"RGBA"``; ``None``: the above) converts
  as Pillow's ``Image.open(f).convert(mode)`` does, pixel for pixel, on both JPEG
  paths: ``(H, W, 1)``, ``(H, W, 2)``, ``(H, W, 3)`` or ``(H, W, 4)`` ``uint8``
  whatever the file holds. An image already in that mode is not converted (no copy).
* A JPEG's EXIF orientation tag is not applied by default (as Pillow and
  torchvision): pixels come as stored. ``exif_transpose=True`` turns them upright
  as ``PIL.ImageOps.exif_transpose`` does, on both JPEG paths (orientations 5-8
  swap height and width); see :mod:`headrace.formats._exif`. A PNG named as a JPEG
  turns as its ``eXIf`` chunk (or XMP packet) says, as Pillow reads them.
* An animated PNG (APNG) is a PNG: it decodes to its default image (the IDAT
  chunks': the first frame, or a still shown where animation is not), as libpng,
  Pillow and torchvision read it; its other frames are not read.

Decoders tolerate no damage: libjpeg and zlib both pad a truncated image
with grey or zeros and carry on, so the structure is checked first (JPEG:
SOI at the start and EOI at the end; PNG: signature and a final IEND chunk),
scan data by simplejpeg's strict mode (CMYK files too, before Pillow decodes
them), a progressive JPEG's scans by what they send (every coefficient in full: one
cut at a scan boundary decodes, blurred, with no warning even in strict mode), a
PNG's image data by its IDAT chunks' CRC-32 (which Pillow skips), and its zlib
stream whole where ``PIL.ImageFile.LOAD_TRUNCATED_IMAGES`` would have Pillow accept
one cut short (:mod:`headrace.formats._png_stream`); Pillow is given the image data
less its last byte, so that a stream that ends, whole, before the image's last
scanline is refused as truncated, not zero-filled. Pillow's path alone (no
simplejpeg) cannot tell a baseline scan cut short, an EOI appended: its libjpeg
fills the rest with grey, and Pillow silences libjpeg's warnings.
Warning filters are left alone (they are process-wide, and decode threads run
beside the training loop): a warning Pillow issues while decoding goes through
the process's filters like any other, and is a ``FormatError`` where they make
it an error.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal, TypeAlias, get_args

import numpy as np
from numpy.typing import NDArray

from headrace._messages import RECOPY
from headrace.errors import CodecUnavailableError, ConfigError, FormatError, UnsupportedFormError
from headrace.formats._buffer import Buffer, BufferReader, as_bytes_view
from headrace.formats._exif import (
    NO_LENGTH,
    apply_orientation,
    jpeg_orientation,
    jpeg_segments,
    png_orientation,
)
from headrace.formats._png_stream import check_png_crcs, check_png_stream, held_back

__all__ = [
    "IMAGE_FORMATS",
    "IMAGE_MODES",
    "PNG16_PART",
    "ImageMode",
    "check_image_mode",
    "decode_image",
    "decode_jpeg",
    "decode_png",
    "jpeg_layout",
    "png_layout",
]

#: FileSource's formats of one image a file, decoded to ``image`` (``"image"``: JPEG,
#: PNG, WebP, BMP, TIFF, PPM and PGM files listed together, each decoded as a JPEG's
#: schema says: :func:`decode_image`).
IMAGE_FORMATS = ("jpeg", "png", "webp", "image")
#: What a decoder converts pixels to, named as Pillow names them (``Image.convert``).
ImageMode: TypeAlias = Literal["L", "LA", "RGB", "RGBA"]
IMAGE_MODES: tuple[ImageMode, ...] = get_args(ImageMode)
#: What the description (fingerprint) of a source that decodes PNGs as stored (no
#: ``image_mode``) holds: 16-bit colour and grey + alpha PNGs decode to uint16, every
#: bit, since 2026-12-02, where headrace read their high bytes (uint8) before. Without
#: it a state saved then resumed silently over other pixels of another dtype. (With an
#: ``image_mode``, Pillow's conversion, the pixels are what they were: not added.)
PNG16_PART: dict[str, str] = {"png16": "uint16"}
#: What an image decodes to: its shape and dtype.
Layout: TypeAlias = tuple[tuple[int, ...], np.dtype[Any]]

_JPEG_SOI = b"\xff\xd8"
_JPEG_EOI = b"\xff\xd9"
_PNG_SIG = b"\x89PNG\r\n\x1a\n"
_PNG_IEND = b"\x00\x00\x00\x00IEND\xaeB`\x82"
_FOUR_CHANNEL = ("CMYK", "YCCK")
# Start-of-frame markers (SOF0-3, 5-7, 9-11, 13-15): the frame's precision comes first.
_SOF = frozenset({*range(0xC0, 0xC4), *range(0xC5, 0xC8), *range(0xC9, 0xCC), *range(0xCD, 0xD0)})
# Progressive start-of-frame markers (SOF2, 6, 10, 14), and start of scan.
_PROGRESSIVE = frozenset({0xC2, 0xC6, 0xCA, 0xCE})
_SOS = 0xDA
# The next marker after a scan's entropy-coded data: ff followed by neither 00 (a stuffed
# ff), a restart marker (d0-d7), nor a fill byte (ff).
_AFTER_SCAN = re.compile(rb"\xff[^\x00\xd0-\xd7\xff]")
# libjpeg's warning for bytes before the EOI marker (0xd9), some of ImageNet's files.
#: Pillow's OSError for a decoder its build lacks (``Image._getdecoder``).
_NO_DECODER = re.compile(r"decoder (\S+) not available")
# simplejpeg's header error for sampling factors TurboJPEG names no level for (libjpeg
# decodes them): CMYK with C, M and Y subsampled, as Pillow writes with subsampling=1 or 2.
_UNKNOWN_SUBSAMPLING = re.compile(r"Could not determine subsampling level")
_EXTRANEOUS_AT_END = re.compile(r"Corrupt JPEG data: \d+ extraneous bytes before marker 0xd9")
# IHDR's bit depth and colour type bytes (after the signature, the chunk's length and
# type, width and height).
_PNG_DEPTH = 24
_PNG_COLOR_TYPE = 25
# Channels as decoded with no mode, by IHDR colour type (3, a palette, is RGB or RGBA
# as a tRNS chunk says: not predicted).
_PNG_CHANNELS = {0: 1, 2: 3, 4: 2, 6: 4}
# 16-bit colour types: Pillow's mode for each and the raw modes that give the high and
# the low bytes of every sample (grey + alpha: four bytes a pixel, taken as they are).
_PNG16_RAW = {
    2: ("RGB", ("RGB;16B", "RGB;16L")),
    4: ("RGBA", ("RGBA",)),
    6: ("RGBA", ("RGBA;16B", "RGBA;16L")),
}
_U8 = np.dtype(np.uint8)

try:
    import simplejpeg as _simplejpeg
except ImportError:  # pragma: no cover - exercised only without the extra
    _simplejpeg = None


def _pil(name: str | None = None) -> Any:
    """Pillow's ``Image`` module; without Pillow an error naming the image ``name`` (in
    a set of thousands, "this image" said not which one stopped the run)."""
    try:
        from PIL import Image
    except ImportError as exc:
        what = f"{name}: decoding this image" if name else "decoding this image"
        raise ConfigError(
            f"{what} needs Pillow, which is not installed: pip install 'headrace[images]'"
        ) from exc
    return Image


def check_image_mode(mode: object, where: str = "mode") -> ImageMode | None:
    """``mode`` if it is ``None`` or one of :data:`IMAGE_MODES`, else a ``ConfigError``."""
    if mode is None or (isinstance(mode, str) and mode in IMAGE_MODES):
        return mode
    hint = ""
    if isinstance(mode, str) and mode.upper() in IMAGE_MODES:
        hint = f" (Pillow's names are upper case: {mode.upper()!r})"
    raise ConfigError(
        f"{where} must be one of {', '.join(map(repr, IMAGE_MODES))} or None (the format's "
        f"own: JPEG RGB, PNG as stored) (got {mode!r}){hint}"
    )


def _bomb_error(name: str, kind: str, pixels: int | str, limit: int) -> FormatError:
    return FormatError(
        f"{name}: {kind} of {pixels} pixels, over twice Pillow's decompression-bomb limit "
        f"(PIL.Image.MAX_IMAGE_PIXELS = {limit:,}); if images this large are expected, "
        "raise it (None: no limit) in every process that decodes (DataLoader workers too)"
    )


def _check_pixels(height: int, width: int, name: str, kind: str) -> None:
    """Refuse what Pillow refuses as a decompression bomb (over twice
    ``PIL.Image.MAX_IMAGE_PIXELS``) on the simplejpeg path too: the decoder
    installed must not decide which images a batch holds."""
    try:
        from PIL import Image
    except ImportError:  # pragma: no cover - without Pillow there is no limit to share
        return
    limit = Image.MAX_IMAGE_PIXELS
    if limit is not None and height * width > 2 * limit:
        raise _bomb_error(name, kind, f"{width} x {height} = {height * width:,}", limit)


def _within_limit(height: int, width: int) -> bool:
    """Whether a header's size may be allocated for before the image decodes: a batch's
    slots are allocated from the first image's layout, so a forged IHDR width of 2**31
    asked NumPy for 432 GiB (a MemoryError naming nothing). Over the limit, no
    layout is predicted and the decode refuses the image, naming it."""
    try:
        from PIL import Image
    except ImportError:  # pragma: no cover - without Pillow there is no limit to share
        return True
    limit = Image.MAX_IMAGE_PIXELS
    return limit is None or height * width <= 2 * limit


def _other_format(view: memoryview) -> str | None:
    """The image format ``view``'s signature names, of those ``datasets``' ``Image()``
    stores besides JPEG and PNG and those phones and the web now write (``None``: none
    of them)."""
    head = bytes(view[:12])
    if head.startswith(b"GIF8"):
        return "GIF"
    if head.startswith(b"RIFF") and head[8:12] == b"WEBP":
        return "WebP"
    if head.startswith(b"BM"):
        return "BMP"
    if head.startswith((b"II*\x00", b"MM\x00*")):
        return "TIFF"
    if head[4:8] == b"ftyp":  # ISO media files: the brand says which
        brand = head[8:12]
        if brand in (b"avif", b"avis"):
            return "AVIF"
        if brand in (b"heic", b"heix", b"hevc", b"mif1", b"msf1"):
            return "HEIF"
    if head.startswith(b"\xff\x0a") or head == b"\x00\x00\x00\x0cJXL \r\n\x87\n":
        return "JPEG XL"
    if head.startswith(b"\xff\x4f\xff\x51") or head == b"\x00\x00\x00\x0cjP  \r\n\x87\n":
        return "JPEG 2000"
    return None


def _other_hint(view: memoryview) -> str:
    """What a JPEG or PNG decoder says of ``view`` when it is another format's image
    (``""``: none it knows). A BMP, TIFF or PPM (PGM) is read by ``format="image"``,
    where until 2026-12-07 every other format was said to need re-encoding."""
    kind = _pillow_only(view)
    if kind is not None:
        return (
            f"; it is a {kind} image, which FileSource reads with format='image': pass "
            "format='image', or re-encode it as a JPEG, PNG or WebP (tables, tar and MDS "
            "shards decode those only)"
        )
    other = _other_format(view)
    if other is None:
        return ""
    return f"; it is a {other} image, and headrace decodes JPEG, PNG and WebP only: re-encode it"


def _empty_error(name: str, kind: str) -> FormatError:
    return FormatError(
        f"{name}: an empty file (0 bytes), not a {kind}: an interrupted copy, upload or "
        "download? Copy it again, or remove it"
    )


def _meant(name: str) -> tuple[str, str, int, str]:
    """What a file the JPEG decoder met was meant to be, by its name: ``format="image"``
    decodes every ``.png`` and ``.webp`` here too, and a ``.bmp``, ``.tif`` or ``.ppm``
    whose signature is not its format's (an empty or garbled ``x.png`` was told it was
    "not a JPEG (nor a PNG)"). The format, the others read, the bytes to show of its
    start, and the signature expected."""
    ext = name.rpartition(".")[2].lower()
    others = "a JPEG, PNG or WebP"
    if ext == "bmp":
        return "BMP", others, 4, "expected b'BM'"
    if ext in ("tif", "tiff"):
        return "TIFF", others, 4, "expected b'II*\\x00' or b'MM\\x00*'"
    if ext in ("ppm", "pgm"):
        return ext.upper(), others, 4, "expected b'P1' to b'P6'"
    if ext == "png":
        return "PNG", "a JPEG or WebP", 8, f"expected {_PNG_SIG!r}"
    if ext == "webp":
        return "WebP", "a JPEG or PNG", 12, "expected b'RIFF', a size, b'WEBP'"
    return "JPEG", "a PNG", 4, "expected SOI marker ff d8"


def _check_jpeg(view: memoryview, name: str) -> None:
    kind, nor, shown, expected = _meant(name)
    if not len(view):
        raise _empty_error(name, kind)
    if len(view) < 4 or bytes(view[:2]) != _JPEG_SOI:
        # Pillow would decode the others, but a GIF may be animated: its first frame
        # alone would be a silent truncation, so they are named and refused instead (a
        # WebP, checked for animation, was decoded before this).
        what = _other_hint(view) or f", {expected}"
        raise FormatError(
            f"{name}: not a {kind} (nor {nor}): starts with {bytes(view[:shown])!r}{what}"
        )
    # Writers may pad with NULs after EOI; any other tail means a cut-off file.
    end = len(view)
    if view[end - 1] == 0:
        # In C, the last 4 KiB (padding is a few bytes), else the whole file: a download
        # stopped in a preallocated file leaves megabytes of zeros, which a step back a
        # byte at a time in Python took seconds over, holding the GIL (8 MiB: 3.6 s).
        window = min(end, 4096)
        kept = len(bytes(view[end - window :]).rstrip(b"\0"))
        end = max(2, end - window + kept if kept else len(bytes(view).rstrip(b"\0")))
    if bytes(view[end - 2 : end]) != _JPEG_EOI:
        last = bytes(view).rfind(_JPEG_EOI)  # error path only: the copy does not matter
        if last > 2:
            raise FormatError(
                f"{name}: JPEG with {len(view) - last - 2} bytes of other data after an EOI "
                f"marker ff d9 at byte {last} (a phone's appended video or trailer?), or a "
                "truncated one: headrace accepts only files that end with EOI, its check for "
                f"truncation; where the image before it is whole, keep that: its first "
                f"{last + 2:,} bytes (data[:{last + 2}]) saved as the file"
            )
        zeros = f", then {len(view) - end:,} zero bytes" if end < len(view) else ""
        raise FormatError(
            f"{name}: truncated JPEG: no EOI marker ff d9 at the end (last bytes "
            f"{bytes(view[max(0, end - 4) : end]).hex(' ')}{zeros}, {len(view)} bytes)"
        )


def _check_scans(view: memoryview, name: str) -> None:
    """Refuse a progressive JPEG (its SOI and EOI checked) whose scans end before every
    coefficient of every component is sent to its last bit (successive approximation 0).

    Cut at a scan boundary, an EOI marker appended (as tools that "repair" a
    truncated file do), it decodes to the scans it has, blurred or without colour, with
    no warning from libjpeg: simplejpeg's strict mode took it too. Every progressive
    script encoders use (libjpeg's, mozjpeg's) sends each coefficient in full. The walk
    is over markers, the scans' data skipped by a C search (for progressive files only);
    where it finds what it does not expect, it leaves the file to the decoder."""
    at, end = 2, len(view)
    sent: dict[int, list[int]] | None = None  # by component id: each coefficient's last Al
    scans = 0
    while at + 4 <= end and view[at] == 0xFF:
        marker = view[at + 1]
        if marker == 0xFF:  # fill byte
            at += 1
            continue
        if marker == 0xD9:  # EOI
            break
        if marker in NO_LENGTH:
            at += 2
            continue
        (length,) = struct.unpack_from(">H", view, at + 2)
        body = view[at + 4 : at + 2 + length]
        at += 2 + length
        if marker in _SOF:
            if marker not in _PROGRESSIVE or len(body) < 6:
                return
            ids = bytes(body[6 : 6 + 3 * body[5] : 3])
            sent = {cid: [-1] * 64 for cid in ids}
        elif marker == _SOS:
            if sent is None or not body or len(body) < 1 + 2 * body[0] + 3:
                return
            n = body[0]
            ss, se, al = body[1 + 2 * n], body[2 + 2 * n], body[3 + 2 * n] & 0x0F
            for cid in bytes(body[1 : 1 + 2 * n : 2]):
                if cid in sent:
                    sent[cid][ss : min(se, 63) + 1] = [al] * (min(se, 63) + 1 - ss)
            scans += 1
            found = _AFTER_SCAN.search(view, at)
            if found is None:
                return
            at = found.start()
    if sent is None or at + 2 > end or view[at + 1] != 0xD9:
        return
    for i, (cid, bits) in enumerate(sent.items()):
        short = sum(1 for al in bits if al != 0)
        if short:
            raise FormatError(
                f"{name}: truncated progressive JPEG: its {scans} scans end (EOI at byte "
                f"{at}) before every coefficient is sent in full (component {i + 1}, id "
                f"{cid}, lacks {short} of its 64 or their last bits): a file cut short at "
                f"a scan boundary, an EOI marker appended: {RECOPY}"
            )


def decode_jpeg(
    data: Buffer,
    *,
    name: str,
    use_simplejpeg: bool | None = None,
    mode: ImageMode | None = None,
    exif_transpose: bool = False,
    out: NDArray[np.uint8] | None = None,
) -> NDArray[np.uint8]:
    """Decode a JPEG to ``(H, W, 3)`` RGB ``uint8``, or to ``mode`` (see the module);
    ``exif_transpose``: turned upright as its EXIF orientation says.

    Uses simplejpeg (libjpeg-turbo, strict mode) when installed, else Pillow;
    ``use_simplejpeg`` forces one (``None``: the fastest available).

    ``out`` (C-contiguous, writable): where the pixels go when the image is its
    shape and dtype, and then ``out`` itself is returned; simplejpeg decodes into it,
    other paths copy into it once. An image of another shape or dtype (its headers
    predicted wrong) is returned in a new array, never a view of ``out``, whose bytes
    are then unspecified (see :mod:`headrace.formats._image_slots`).
    """
    want: ImageMode = check_image_mode(mode) or "RGB"
    _check_out(out)
    view = as_bytes_view(data, name)
    if bytes(view[:4]) == b"RIFF" and bytes(view[8:12]) == b"WEBP":
        # A WebP named .jpg (web crawls hold them): read by its bytes, as Pillow and
        # torchvision read it, to ``want`` (RGB by default) as the JPEG schema says.
        from headrace.formats._webp import decode_webp  # it imports this module

        return decode_webp(view, name=name, mode=want, exif_transpose=exif_transpose, out=out)
    turn = _orientation(view) if exif_transpose else 1
    try:
        arr = _decode_jpeg(view, name, use_simplejpeg, want, out if turn == 1 else None)
    except FormatError as exc:
        _check_precision(view, name, exc)
        raise
    if turn == 1:
        return _fit(arr, out)
    h, w, c = arr.shape
    turned = (w, h, c) if turn >= 5 else (h, w, c)  # 5-8 swap height and width
    fits = out is not None and out.shape == turned and out.dtype == arr.dtype
    return apply_orientation(arr, turn, out if fits else None)


def decode_image(
    data: Buffer,
    *,
    name: str,
    mode: ImageMode | None = None,
    exif_transpose: bool = False,
    out: NDArray[np.uint8] | None = None,
) -> NDArray[np.uint8]:
    """``format="image"``'s decode: a file of any format torchvision's ``ImageFolder``
    reads, told by its bytes, to ``(H, W, 3)`` RGB ``uint8`` or ``mode`` (its
    ``Image.open(f).convert("RGB")``). JPEG, PNG and WebP as :func:`decode_jpeg` decodes
    them; BMP, TIFF, PPM and PGM by Pillow (:func:`_decode_by_pillow`). ``exif_transpose``
    and ``out`` as :func:`decode_jpeg`'s; a TIFF is turned upright by its orientation tag
    whatever ``exif_transpose`` says, as Pillow loads it (and so torchvision reads it)."""
    view = as_bytes_view(data, name)
    kind = _pillow_only(view)
    if kind is None:
        return decode_jpeg(view, name=name, mode=mode, exif_transpose=exif_transpose, out=out)
    want: ImageMode = check_image_mode(mode) or "RGB"
    _check_out(out)
    return _decode_by_pillow(view, name, kind, want, out)


def _pillow_only(view: memoryview) -> str | None:
    """The Pillow plugin of the formats ``format="image"`` reads besides JPEG, PNG and
    WebP (the rest of torchvision's ``IMG_EXTENSIONS``) that ``view``'s signature names,
    or ``None``: BMP, TIFF (BigTIFF too), and PPM's binary and plain P1-P6 (PGM's too)."""
    head = bytes(view[:4])
    if head[:2] == b"BM":
        return "BMP"
    if head in (b"II*\0", b"MM\0*", b"II+\0", b"MM\0+"):
        return "TIFF"
    if len(head) >= 3 and head[:1] == b"P" and head[1:2] in b"123456" and head[2:3].isspace():
        return "PPM"
    return None


class _EndReader(BufferReader):
    """A :class:`BufferReader` that notes a read that found the end of the file
    (``ended``). Pillow's loader reads again only while its decoder wants more data, so
    such a read while an image loads is a file cut short: Pillow refuses it, but where
    ``PIL.ImageFile.LOAD_TRUNCATED_IMAGES`` is set (a line many training scripts carry) it
    pads the rest with zeros and says nothing."""

    ended = False

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        n = super().readinto(buffer)
        if n == 0 and memoryview(buffer).nbytes:
            self.ended = True
        return n


def _decode_by_pillow(
    view: memoryview,
    name: str,
    kind: str,
    want: ImageMode,
    out: NDArray[np.uint8] | None,
) -> NDArray[np.uint8]:
    """A BMP, TIFF or PPM (``kind``: its Pillow plugin) decoded by Pillow and converted to
    ``want`` as ``Image.open(f).convert(want)`` does. Damage is refused, naming the file:
    Pillow's errors, image data that the file ends before (:class:`_EndReader`; a TIFF's
    strips or tiles past its end), and a multi-page TIFF, whose first page alone would
    be a silent truncation of the sample (refused as an animated WebP is)."""
    image_mod = _pil(name)
    reader = _EndReader(view)
    with _pil_errors(image_mod, name, kind), _pil_open(image_mod, view, kind, reader) as img:
        try:
            _check_pixels(img.size[1], img.size[0], name, kind)
            pages = getattr(img, "n_frames", 1)
            if pages != 1:
                raise UnsupportedFormError(  # not damage: on_corrupt="replace" raises it
                    f"{name}: a {kind} of {pages} pages, whose first page alone "
                    "(torchvision's ImageFolder reads it) would be a silent truncation of the "
                    "sample; headrace decodes single images only: save the pages you train "
                    "on as files of their own"
                )
            if kind == "TIFF":
                _check_tiff_data(img.tag_v2, len(view), name)
            # (libtiff is handed the whole file, read to its end; a plain PPM's decoder may
            # read there to end its last number: no sign of a cut for either)
            told = not any(tile[0] in ("libtiff", "ppm_plain") for tile in img.tile)
            reader.ended = False
            img.load()
        except (struct.error, IndexError, KeyError, TypeError) as exc:  # a header misread
            raise FormatError(f"{name}: corrupt {kind} ({exc!r}): {RECOPY}") from exc
        if told and reader.ended:
            raise FormatError(
                f"{name}: truncated {kind}: the file ({len(view):,} bytes) ends before its "
                f"image data does: {RECOPY}"
            )
        if img.mode != want:
            img = img.convert(want)
        arr: NDArray[np.uint8] = np.asarray(img)
    if arr.ndim == 2:
        arr = arr[:, :, np.newaxis]
    return _fit(arr, out)


def _check_tiff_data(tags: Any, size: int, name: str) -> None:
    """Refuse a TIFF whose strips (or tiles) end past the file's ``size``: the file is cut
    short (libtiff, which decodes compressed TIFFs, is handed the bytes there are)."""
    for offsets_tag, counts_tag in ((273, 279), (324, 325)):  # strips, tiles
        offsets, counts = tags.get(offsets_tag), tags.get(counts_tag)
        if offsets is None or counts is None:
            continue
        offsets = offsets if isinstance(offsets, tuple) else (offsets,)
        counts = counts if isinstance(counts, tuple) else (counts,)
        end = max((o + c for o, c in zip(offsets, counts, strict=False)), default=0)
        if end > size:
            raise FormatError(
                f"{name}: truncated TIFF: its image data runs to byte {end:,}, the file has "
                f"{size:,} bytes: {RECOPY}"
            )


def _orientation(view: memoryview) -> int:
    """The EXIF orientation of a JPEG, or of a PNG named as one (its ``eXIf`` chunk, which
    ``PIL.ImageOps.exif_transpose`` reads too: it was left as stored)."""
    return png_orientation(view) if bytes(view[:8]) == _PNG_SIG else jpeg_orientation(view)


def _check_precision(view: memoryview, name: str, exc: FormatError) -> None:
    """Where a JPEG failed to decode, refuse one whose samples are not 8 bits (12-bit
    medical and scientific images) as such: libjpeg, as simplejpeg and Pillow build it,
    reads 8-bit samples only, and "corrupt JPEG ... copy the file again" sent its owner
    after a good file."""
    if bytes(view[:2]) != _JPEG_SOI:
        return
    for marker, start, stop in jpeg_segments(view):
        if marker in _SOF and stop > start:
            if view[start] != 8 and 2 <= view[start] <= 16:  # (else: a damaged header)
                raise UnsupportedFormError(  # not damage: on_corrupt="replace" raises it
                    f"{name}: a {view[start]}-bit JPEG (SOF{marker - 0xC0}), which neither "
                    "simplejpeg nor Pillow decodes (libjpeg as they build it reads 8-bit "
                    "samples only); the file need not be damaged: convert it, e.g. to a "
                    "16-bit PNG, which keeps every bit"
                ) from exc
            return


def jpeg_layout(
    data: Buffer, *, mode: ImageMode | None = None, exif_transpose: bool = False
) -> Layout | None:
    """What :func:`decode_jpeg` will give for ``data``, read from its headers alone
    (microseconds), or ``None`` where they do not say (not a JPEG, damaged, no
    simplejpeg). A prediction, not a check: the decode is what counts."""
    view = as_bytes_view(data, "image")
    want: ImageMode = mode or "RGB"
    if bytes(view[:8]) == _PNG_SIG:  # a PNG named .jpg: decoded to ``want``
        layout = png_layout(view, mode=want)
        if layout is None or not (exif_transpose and png_orientation(view) >= 5):
            return layout
        (height, width, channels), dtype = layout
        return (width, height, channels), dtype
    if bytes(view[:4]) == b"RIFF" and bytes(view[8:12]) == b"WEBP":
        from headrace.formats._webp import webp_layout  # it imports this module

        return webp_layout(view, mode=want, exif_transpose=exif_transpose)
    if _simplejpeg is None or bytes(view[:2]) != _JPEG_SOI:
        return None
    try:
        height, width, _, _ = _simplejpeg.decode_jpeg_header(view)
    except ValueError:
        return None
    if exif_transpose and jpeg_orientation(view) >= 5:
        height, width = width, height
    if not _within_limit(height, width):
        return None
    return (height, width, len(want)), _U8


def png_layout(data: Buffer, *, mode: ImageMode | None = None) -> Layout | None:
    """What :func:`decode_png` will give for ``data``, from its IHDR chunk, or
    ``None`` (a palette without ``mode``, bit depths Pillow may read otherwise,
    no IHDR); a prediction, as :func:`jpeg_layout`'s."""
    view = as_bytes_view(data, "image")
    if len(view) < 33 or bytes(view[:8]) != _PNG_SIG or bytes(view[12:16]) != b"IHDR":
        return None
    width, height, depth, colour = struct.unpack_from(">IIBB", view, 16)
    if not _within_limit(height, width):
        return None
    if mode is not None:
        return (height, width, len(mode)), _U8
    channels = _PNG_CHANNELS.get(colour)
    if channels is None or depth not in ((1, 2, 4, 8, 16) if colour == 0 else (8, 16)):
        return None
    return (height, width, channels), np.dtype(np.uint16) if depth == 16 else _U8


def _check_out(out: NDArray[Any] | None) -> None:
    if out is not None and not (out.flags.c_contiguous and out.flags.writeable):
        raise ConfigError(
            f"out must be a C-contiguous, writable array (got one with "
            f"c_contiguous={out.flags.c_contiguous}, writeable={out.flags.writeable})"
        )


def _fit(arr: NDArray[Any], out: NDArray[Any] | None) -> NDArray[Any]:
    """``out`` holding ``arr`` (copied unless it is there already) when they agree in
    shape and dtype, else ``arr`` (as its own array, never a view into ``out``)."""
    if out is None or arr is out:
        return arr
    if arr.shape == out.shape and arr.dtype == out.dtype:
        if not (arr.base is out or np.shares_memory(arr, out)):
            np.copyto(out, arr)
        return out
    return arr.copy() if np.shares_memory(arr, out) else arr


def _decode_jpeg(
    view: memoryview,
    name: str,
    use_simplejpeg: bool | None,
    want: ImageMode,
    out: NDArray[np.uint8] | None = None,
) -> NDArray[np.uint8]:
    if bytes(view[:8]) == _PNG_SIG:
        # A PNG named .jpg (ImageNet's train set holds one, crawls many): Pillow, and so
        # torchvision, reads it by its bytes; as RGB it fits the JPEG schema.
        return _pil_decode(_check_png(view, name), name, "PNG", want)
    _check_jpeg(view, name)
    _check_scans(view, name)
    use_sj = _simplejpeg is not None if use_simplejpeg is None else use_simplejpeg
    if use_sj:
        if _simplejpeg is None:  # pragma: no cover
            raise ConfigError("simplejpeg is not installed: pip install 'headrace[images]'")
        try:
            height, width, colorspace, _ = _simplejpeg.decode_jpeg_header(view)
        except ValueError as exc:
            if _UNKNOWN_SUBSAMPLING.search(str(exc)) and _subsampled_cmyk(view):
                # Sound, but sampled as TurboJPEG's API has no name for (a CMYK file
                # with C, M and Y halved): libjpeg decodes it, and so Pillow and
                # torchvision read it; it was refused as corrupt. Pillow's path, whose
                # libjpeg cannot tell a baseline scan cut short (the checks above ran).
                return _pil_decode(view, name, "JPEG", want)
            raise FormatError(f"{name}: corrupt JPEG ({exc}): {RECOPY}") from exc
        _check_pixels(height, width, name, "JPEG")
        if colorspace in _FOUR_CHANNEL:
            # simplejpeg's own CMYK -> RGB rounds differently from Pillow's (off by one
            # in places): both paths must give the same array, so these go to Pillow.
            # Pillow's libjpeg fills damaged scan data with grey and warns no one: a
            # strict decode first refuses such a file, as for every other JPEG here.
            _simplejpeg_decode(view, name, "CMYK")
            return _pil_decode(view, name, "JPEG", want)
        # Only into a buffer of exactly the header's size: simplejpeg fills a larger
        # one's first bytes, and refuses a smaller one as a ValueError, a "corrupt JPEG".
        size = (height, width, len(want))
        into = out if out is not None and out.shape == size and out.dtype == np.uint8 else None
        if want in ("RGB", "RGBA"):
            # libjpeg-turbo writes RGBA's alpha as 255, as Pillow's RGB -> RGBA does.
            return _simplejpeg_decode(view, name, want, into)
        if colorspace == "Gray":
            # Grey as stored, as Pillow decodes it: no round trip through RGB.
            if want == "L":
                return _simplejpeg_decode(view, name, "GRAY", into)
            return _convert_array(_simplejpeg_decode(view, name, "GRAY"), want, name)
        # A colour file's grey is Pillow's luma of its RGB pixels, not libjpeg's Y
        # channel (they differ by rounding): decoded as RGB, converted as Pillow does.
        return _convert_array(_simplejpeg_decode(view, name, "RGB"), want, name)
    return _pil_decode(view, name, "JPEG", want)


def _subsampled_cmyk(view: memoryview) -> bool:
    """Whether ``view``'s frame header is a sound 8-bit, 4-component (CMYK/YCCK) one whose
    sampling factors differ: what simplejpeg's header call cannot name a level for. Other
    files that it says so of are damaged (garbage between markers, a broken frame
    header) and stay refused as corrupt."""
    for marker, start, stop in jpeg_segments(view):
        if marker in _SOF:
            body = bytes(view[start:stop])
            if len(body) != 6 + 3 * 4 or body[0] != 8 or body[5] != 4:
                return False
            factors = body[7::3]
            return all(f >> 4 in (1, 2, 4) and f & 15 in (1, 2, 4) for f in factors) and (
                len(set(factors)) > 1
            )
    return False


def _simplejpeg_decode(
    view: memoryview, name: str, colorspace: str, out: NDArray[np.uint8] | None = None
) -> NDArray[np.uint8]:
    assert _simplejpeg is not None
    try:
        got: NDArray[np.uint8] = _simplejpeg.decode_jpeg(
            view, colorspace=colorspace, strict=True, buffer=out
        )
    except ValueError as exc:
        if not _EXTRANEOUS_AT_END.fullmatch(str(exc)):
            raise FormatError(f"{name}: corrupt JPEG ({exc}): {RECOPY}") from exc
        # Bytes between the last scan and EOI, which libjpeg skips: every pixel was
        # decoded, and any damage before them would have raised first (in order).
        # Pillow ignores the warning; so must this path, or the decoder decides.
        got = _simplejpeg.decode_jpeg(view, colorspace=colorspace, strict=False, buffer=out)
    if out is not None and got.shape == out.shape:
        return out  # simplejpeg's array is a view of it
    return got


def _convert_array(arr: NDArray[np.uint8], mode: ImageMode, name: str) -> NDArray[np.uint8]:
    """``arr`` (grey or RGB) converted to ``mode`` by Pillow itself, so the rounding is
    its own (``L = (19595 R + 38470 G + 7471 B + 2**15) >> 16``, alpha 255)."""
    pil = _pil(name).fromarray(arr[:, :, 0] if arr.shape[2] == 1 else arr)
    out: NDArray[np.uint8] = np.asarray(pil.convert(mode))
    return out[:, :, np.newaxis] if out.ndim == 2 else out


def _pil_decode(
    view: memoryview, name: str, kind: str, mode: ImageMode | None
) -> NDArray[np.uint8]:
    """Decode with Pillow, then ``convert(mode)`` unless the image is in ``mode``
    already (``None``: a PNG's own mode, see :func:`_png_mode`)."""
    image_mod = _pil(name)
    with _pil_errors(image_mod, name, kind), _pil_open(image_mod, view, kind) as img:
        _check_pixels(img.size[1], img.size[0], name, kind)
        img.load()
        if mode in ("L", "RGB"):
            # tRNS changes no pixel of an "L" or "RGB" result, only its info; for a
            # palette's several alphas Pillow warns (advice, made an error here).
            img.info.pop("transparency", None)
        if mode is None:
            img = _png_mode(img)
        elif img.mode != mode:  # convert() copies even when the mode is the same
            img = img.convert(mode)
        arr = np.asarray(img)
    if arr.ndim == 2:
        arr = arr[:, :, np.newaxis]
    return arr


@contextmanager
def _pil_errors(image_mod: Any, name: str, kind: str) -> Iterator[None]:
    """Pillow's errors and warnings-made-errors as a ``FormatError`` naming the file."""
    try:
        yield
    except (OSError, SyntaxError, ValueError, Warning, EOFError) as exc:
        # Pillow's "cannot identify image file" names our reader object, not the file;
        # a plugin's own reason (a header's bad CRC-32) is kept, its "not a JPEG file"
        # or "not identified by this driver" (which say no more than this) not.
        why: object = exc
        lacks = _NO_DECODER.fullmatch(str(exc)) if isinstance(exc, OSError) else None
        if lacks:  # not damage: "corrupt ... copy the file again" sent its owner after it
            version = getattr(image_mod, "__version__", "?")
            raise CodecUnavailableError(
                f"{name}: this Pillow ({version}) has no {lacks[1]!r} decoder (built without "
                f"its library), so no {kind} image decodes in this process: install a Pillow "
                "wheel from PyPI"
            ) from exc
        if isinstance(exc, image_mod.UnidentifiedImageError):
            cause = exc.__cause__
            why = "no image header found"
            if isinstance(cause, SyntaxError) and not str(cause).startswith("not "):
                why = f"{why}: {cause}"
        raise FormatError(f"{name}: corrupt or truncated {kind} ({why}): {RECOPY}") from exc


def _pil_open(
    image_mod: Any, view: memoryview, kind: str, reader: BufferReader | None = None
) -> Any:
    """``Image.open(f, formats=[kind])`` without its decompression-bomb check, which
    :func:`_check_pixels` makes instead: over ``MAX_IMAGE_PIXELS`` Pillow warns and
    decodes, and making that warning an error (or ignoring it) takes a warning filter,
    which is process-wide; the plugin's own opener, as ``Image.open`` calls it, needs
    none. Over twice the limit is refused, as Pillow refuses it. ``reader``: the file
    Pillow reads ``view`` through (a new one where ``None``)."""
    if kind not in image_mod.OPEN:
        image_mod.preinit()  # registers JPEG and PNG, as Image.open does
    if kind not in image_mod.OPEN:
        image_mod.init()  # every other plugin (WebP's)
    if kind not in image_mod.OPEN:
        raise ConfigError(
            f"this Pillow ({getattr(image_mod, '__version__', '?')}) cannot open {kind} "
            "images (built without its library): install a Pillow wheel from PyPI"
        )
    factory = image_mod.OPEN[kind][0]
    try:
        return factory(reader or BufferReader(view), None)
    except (SyntaxError, IndexError, TypeError, struct.error) as exc:
        # What Image.open says for these: no plugin could read the header.
        raise image_mod.UnidentifiedImageError(f"cannot identify image file ({exc})") from exc


def _png_mode(img: Any) -> Any:
    mode = img.mode
    if mode == "P":
        return img.convert("RGBA" if "transparency" in img.info else "RGB")
    if mode == "1":
        return img.convert("L")
    if mode in ("I;16", "I;16B", "I;16L"):
        return img
    if mode == "I":
        # 16-bit grey is reported as 32-bit "I" by some Pillow versions.
        return img
    if mode in ("L", "LA", "RGB", "RGBA"):
        return img
    return img.convert("RGBA" if "A" in mode else "RGB")


def _check_png(view: memoryview, name: str) -> memoryview:
    """A PNG must end with its IEND chunk: zlib pads a truncated image and goes on; its
    image data must match its CRC-32s, which Pillow does not check. Where Pillow is told
    to accept truncated images, its image data is checked whole first. Returns what
    Pillow is to decode: ``view`` less its image data's last byte (see
    :func:`~headrace.formats._png_stream.held_back`)."""
    _check_png_end(view, name)
    pillows = held_back(view, check_png_crcs(view, name))
    try:
        from PIL import ImageFile
    except ImportError:  # pragma: no cover - the decode says what to install
        return pillows
    if ImageFile.LOAD_TRUNCATED_IMAGES:
        if len(view) >= 24 and bytes(view[12:16]) == b"IHDR":
            # The size first, as the decode checks it: a bomb is not inflated whole
            # here, nor a forged size called corrupt image data.
            width, height = struct.unpack_from(">II", view, 16)
            _check_pixels(height, width, name, "PNG")
        check_png_stream(view, name)
    return pillows


def _check_png_end(view: memoryview, name: str) -> None:
    if bytes(view[-12:]) != _PNG_IEND:
        at = bytes(view).rfind(_PNG_IEND)  # error path only
        if at > 0:
            raise FormatError(
                f"{name}: PNG with {len(view) - at - 12} bytes of other data after its IEND "
                f"chunk (which ends at byte {at + 12}): headrace accepts only files that end "
                "with IEND, its check for truncation"
            )
        raise FormatError(
            f"{name}: truncated PNG: the file does not end with an IEND chunk ({len(view)} bytes)"
        )


def decode_png(
    data: Buffer,
    *,
    name: str,
    mode: ImageMode | None = None,
    out: NDArray[Any] | None = None,
) -> NDArray[np.generic]:
    """Decode a PNG to ``(H, W, C)`` as stored, or to ``mode`` (see the module).

    ``out``: where the pixels are copied (once, from Pillow's image) when the image
    is its shape and dtype, and then ``out`` is returned (see :func:`decode_jpeg`)."""
    mode = check_image_mode(mode)
    _check_out(out)
    view = as_bytes_view(data, name)
    if not len(view):
        raise _empty_error(name, "PNG")
    if bytes(view[:8]) != _PNG_SIG:
        other = "JPEG" if bytes(view[:2]) == _JPEG_SOI else _other_format(view)
        if other == "JPEG":
            what = "; it is a JPEG image: read the set with format='jpeg' (which reads PNGs too)"
        elif other == "WebP":
            what = "; it is a WebP image: read the set with format='webp'"
        else:
            what = _other_hint(view)
        raise FormatError(
            f"{name}: not a PNG: starts with {bytes(view[:8])!r}, expected {_PNG_SIG!r}{what}"
        )
    view = _check_png(view, name)
    if mode is not None:
        return _fit(_pil_decode(view, name, "PNG", mode), out)
    if (
        len(view) > _PNG_COLOR_TYPE
        and view[_PNG_DEPTH] == 16
        and view[_PNG_COLOR_TYPE] in _PNG16_RAW
    ):
        return _fit(_png16(view, name, view[_PNG_COLOR_TYPE]), out)
    arr: NDArray[np.generic] = _pil_decode(view, name, "PNG", None)
    if arr.dtype == np.int32:
        # Pillow's "I" mode for 16-bit grey: values fit uint16 by construction.
        arr = arr.astype(np.uint16)
    elif arr.dtype.byteorder == ">":
        arr = arr.astype(arr.dtype.newbyteorder("="))
    return _fit(arr, out)


def _png16(view: memoryview, name: str, colour: int) -> NDArray[np.uint16]:
    """A 16-bit colour (2), grey + alpha (4) or RGBA (6) PNG as ``uint16``, every bit.

    Pillow has no 16-bit colour mode: it unpacks these to their high bytes. Its PNG
    tile names the raw mode that unpacks the unfiltered scanlines, and raw modes of
    the same pixel size read the other bytes: ``RGB;16L`` takes the second byte of
    each sample, the low one of a PNG's big-endian samples; ``RGBA`` takes grey +
    alpha's four bytes a pixel as they are. Inflating and unfiltering stay
    Pillow's (C, and exactly the PNG filters, Adam7 included); colour costs two
    decodes, one for each byte. A Pillow whose tile is not the one expected is
    refused by name: never the high bytes alone, silently."""
    image_mod = _pil(name)
    pil_mode, rawmodes = _PNG16_RAW[colour]
    parts = []
    for rawmode in rawmodes:
        with _pil_errors(image_mod, name, "PNG"), _pil_open(image_mod, view, "PNG") as img:
            _check_pixels(img.size[1], img.size[0], name, "PNG")
            tile = img.tile[0] if len(img.tile) == 1 else None
            if img.mode != pil_mode or tile is None or tile.codec_name != "zip":
                raise CodecUnavailableError(  # this Pillow's lack, not the file's damage
                    f"{name}: a 16-bit PNG (colour type {colour}) that this Pillow "
                    f"({getattr(image_mod, '__version__', '?')}) opens as mode "
                    f"{img.mode!r} with tiles {img.tile!r}, not one {pil_mode!r} zip "
                    "tile: headrace cannot read its low bytes; pass image_mode='RGB' "
                    "(or 'RGBA') for 8 bits, or report it with the Pillow version"
                )
            img.tile = [tile._replace(args=rawmode)]
            img.load()
            parts.append(np.asarray(img))
    if len(parts) == 1:  # grey + alpha: each pixel's four bytes, big-endian samples
        h, w = parts[0].shape[:2]
        return parts[0].view(">u2").reshape(h, w, 2).astype(np.uint16)
    out = parts[0].astype(np.uint16)
    out <<= 8
    out |= parts[1]
    return out
