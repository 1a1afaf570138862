"""WebP: strict decoding of still images to ``HxWxC`` uint8 arrays.

Sample schema: ``(H, W, 3)`` RGB, or ``(H, W, 4)`` RGBA where the file says it has
alpha (as Pillow opens it: a lossless file whose alpha is all 255 may be RGB); with
``mode`` (``"L"``, ``"LA"``, ``"RGB"``, ``"RGBA"``) Pillow's ``convert(mode)``, as
for JPEG and PNG. ``exif_transpose=True`` turns the pixels upright as the file's
``EXIF`` chunk (or, where it has no orientation, its ``XMP `` chunk) says, as
``PIL.ImageOps.exif_transpose`` does.

Damage is refused before libwebp sees the bytes: the RIFF container's size must be
the file's (a cut-off file, or bytes after it), and its chunks must tile it exactly.
An animated WebP is refused by name: its first frame alone would be a silent
truncation of the sample. Pixels are Pillow's (libwebp), on every path.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
from numpy.typing import NDArray

from headrace._messages import RECOPY
from headrace.errors import FormatError, UnsupportedFormError
from headrace.formats._buffer import Buffer, as_bytes_view
from headrace.formats._exif import apply_orientation, exif_tiff, tiff_orientation
from headrace.formats._images import (
    ImageMode,
    Layout,
    _check_out,
    _check_pixels,
    _empty_error,
    _fit,
    _pil,
    _pil_errors,
    _pil_open,
    _within_limit,
    check_image_mode,
)

__all__ = ["decode_webp", "is_webp", "webp_layout"]

_U8 = np.dtype(np.uint8)
# VP8X flags (the byte after the chunk header).
_ANIMATION = 0x02
_ALPHA = 0x10
_VP8_START = b"\x9d\x01\x2a"  # a lossy frame's start code, after its 3-byte tag
_VP8L_SIGNATURE = 0x2F


def is_webp(view: memoryview) -> bool:
    """Whether ``view`` starts as a WebP file (``RIFF`` ... ``WEBP``)."""
    return bytes(view[:4]) == b"RIFF" and bytes(view[8:12]) == b"WEBP"


def _chunks(view: memoryview, name: str) -> dict[bytes, memoryview]:
    """Each chunk's payload by its FourCC (the first of each), after checking that the
    RIFF size is the file's and that the chunks tile it; a ``FormatError`` naming what
    is wrong otherwise."""
    size = len(view)
    if size < 20 or not is_webp(view):
        raise FormatError(
            f"{name}: not a WebP: starts with {bytes(view[:12])!r}, expected b'RIFF', a "
            "size and b'WEBP'"
        )
    (riff,) = struct.unpack_from("<I", view, 4)
    if riff + 8 != size:
        what = (
            f"truncated WebP: its RIFF header says {riff + 8} bytes, the file has {size}"
            if riff + 8 > size
            else f"WebP with {size - riff - 8} bytes of other data after its RIFF container "
            f"(which ends at byte {riff + 8}): headrace accepts only files that end with it, "
            "its check for truncation"
        )
        raise FormatError(f"{name}: {what}")
    found: dict[bytes, memoryview] = {}
    at = 12
    while at < size:
        if at + 8 > size:
            raise FormatError(f"{name}: corrupt WebP: a chunk header cut at byte {at}: {RECOPY}")
        fourcc = bytes(view[at : at + 4])
        (length,) = struct.unpack_from("<I", view, at + 4)
        end = at + 8 + length
        if end > size:
            raise FormatError(
                f"{name}: corrupt WebP: chunk {fourcc!r} at byte {at} of {length} bytes runs "
                f"past the end of the file ({size} bytes): {RECOPY}"
            )
        found.setdefault(fourcc, view[at + 8 : end])
        at = end + (length & 1)  # payloads are padded to an even length
    return found


def _frame(chunks: dict[bytes, memoryview], name: str) -> tuple[int, int, bool, int]:
    """``(height, width, alpha, orientation)`` from the headers, refusing an animation."""
    orientation = 1
    if b"VP8X" in chunks:
        x = chunks[b"VP8X"]
        if len(x) < 10:
            raise FormatError(f"{name}: corrupt WebP: a VP8X chunk of {len(x)} bytes: {RECOPY}")
        if x[0] & _ANIMATION or b"ANIM" in chunks or b"ANMF" in chunks:
            raise UnsupportedFormError(  # not damage: on_corrupt="replace" raises it
                f"{name}: an animated WebP: its first frame alone would be a "
                "silent truncation of the sample; headrace decodes still images only: "
                "extract the frames you train on"
            )
        width = 1 + int.from_bytes(x[4:7], "little")
        height = 1 + int.from_bytes(x[7:10], "little")
        tiff = exif_tiff(bytes(chunks[b"EXIF"])) if b"EXIF" in chunks else None
        xmp = chunks.get(b"XMP ")
        orientation = tiff_orientation(tiff, xmp)
        return height, width, bool(x[0] & _ALPHA), orientation
    if b"VP8 " in chunks:
        f = chunks[b"VP8 "]
        if len(f) < 10 or bytes(f[3:6]) != _VP8_START:
            raise FormatError(f"{name}: corrupt WebP: no VP8 frame header: {RECOPY}")
        width, height = struct.unpack_from("<HH", f, 6)
        return height & 0x3FFF, width & 0x3FFF, False, 1
    if b"VP8L" in chunks:
        f = chunks[b"VP8L"]
        if len(f) < 5 or f[0] != _VP8L_SIGNATURE:
            raise FormatError(f"{name}: corrupt WebP: no VP8L header: {RECOPY}")
        (bits,) = struct.unpack_from("<I", f, 1)
        return ((bits >> 14) & 0x3FFF) + 1, (bits & 0x3FFF) + 1, bool(bits >> 28 & 1), 1
    raise FormatError(
        f"{name}: corrupt WebP: no VP8, VP8L or VP8X chunk (chunks {sorted(chunks)}): {RECOPY}"
    )


def webp_layout(
    data: Buffer, *, mode: ImageMode | None = None, exif_transpose: bool = False
) -> Layout | None:
    """What :func:`decode_webp` will give for ``data``, from its headers, or ``None``
    where they do not say (damaged, animated, over the bomb limit); a prediction (a
    lossless file's alpha hint may be wrong), as :func:`~headrace.formats._images.
    jpeg_layout`'s: the decode is what counts."""
    view = as_bytes_view(data, "image")
    try:
        height, width, alpha, turn = _frame(_chunks(view, "image"), "image")
    except FormatError:
        return None
    if exif_transpose and turn >= 5:
        height, width = width, height
    if not _within_limit(height, width):
        return None
    channels = len(mode) if mode is not None else 4 if alpha else 3
    return (height, width, channels), _U8


def decode_webp(
    data: Buffer,
    *,
    name: str,
    mode: ImageMode | None = None,
    exif_transpose: bool = False,
    out: NDArray[Any] | None = None,
) -> NDArray[np.uint8]:
    """Decode a still WebP to ``(H, W, 3)`` RGB or ``(H, W, 4)`` RGBA, or to ``mode``
    (see the module); ``out``: where the pixels are copied when the image is its shape
    and dtype, and then ``out`` is returned (see :func:`~headrace.formats._images.
    decode_jpeg`)."""
    mode = check_image_mode(mode)
    _check_out(out)
    view = as_bytes_view(data, name)
    if not len(view):
        raise _empty_error(name, "WebP")
    height, width, _, turn = _frame(_chunks(view, name), name)
    _check_pixels(height, width, name, "WebP")
    image_mod = _pil(name)
    with _pil_errors(image_mod, name, "WebP"), _pil_open(image_mod, view, "WEBP") as img:
        if getattr(img, "n_frames", 1) != 1:  # pragma: no cover - refused by its headers
            raise UnsupportedFormError(f"{name}: an animated WebP ({img.n_frames} frames)")
        img.load()
        want = mode or ("RGBA" if "A" in img.mode else "RGB")
        if img.mode != want:
            img = img.convert(want)
        arr: NDArray[np.uint8] = np.asarray(img)
    if arr.ndim == 2:
        arr = arr[:, :, np.newaxis]
    if not exif_transpose or turn == 1:
        return _fit(arr, out)
    h, w, c = arr.shape
    turned = (w, h, c) if turn >= 5 else (h, w, c)
    fits = out is not None and out.shape == turned and out.dtype == arr.dtype
    return apply_orientation(arr, turn, out if fits else None)
