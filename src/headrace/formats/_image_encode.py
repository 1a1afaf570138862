"""JPEG, PNG and WebP encoding: deterministic bytes for a dataset's files and the tests.

The same array gives the same bytes (simplejpeg, or Pillow, at a fixed quality; Pillow's
PNG at a fixed compression level); 16-bit colour PNGs, which Pillow cannot write, are
written here, unfiltered.
"""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
from numpy.typing import NDArray

from headrace.errors import ConfigError
from headrace.formats import _images  # its Pillow import and PNG signature

__all__ = ["encode_jpeg", "encode_png", "encode_webp"]

try:
    import simplejpeg as _simplejpeg
except ImportError:  # pragma: no cover - exercised only without the extra
    _simplejpeg = None

# The most pixels a side each format holds (libjpeg: JPEG_MAX_DIMENSION; WebP: 14 bits).
_JPEG_MAX_SIDE = 65500
_WEBP_MAX_SIDE = 16383


def _check_size(img: NDArray[np.generic], kind: str, most: int | None = None) -> None:
    """Refuse an image ``kind`` cannot hold by its size, before the encoder does
    (simplejpeg's "Invalid argument", libwebp's MemoryError for an empty image)."""
    h, w = img.shape[:2]
    if not h or not w:
        raise ConfigError(f"{kind} cannot hold an empty image (got {h} x {w}, shape {img.shape})")
    if most is not None and max(h, w) > most:
        raise ConfigError(
            f"{kind} cannot hold a {h} x {w} image: each side at most {most:,} pixels; "
            "crop or resize it, or write it as PNG"
        )


def encode_jpeg(image: NDArray[np.uint8], *, quality: int = 90) -> bytes:
    """JPEG bytes of an ``(H, W, 3)`` or ``(H, W)`` / ``(H, W, 1)`` uint8 image."""
    if not 1 <= quality <= 100:
        raise ConfigError(f"JPEG quality must be in 1..100 (got {quality=})")
    img = np.ascontiguousarray(image)
    if img.dtype != np.uint8 or img.ndim not in (2, 3):
        raise ConfigError(f"JPEG needs a uint8 HxW or HxWxC image (got {img.dtype} {img.shape})")
    if img.ndim == 2:
        img = img[:, :, np.newaxis]
    if img.shape[2] not in (1, 3):
        raise ConfigError(f"JPEG needs 1 or 3 channels (got {img.shape[2]})")
    _check_size(img, "JPEG", _JPEG_MAX_SIDE)
    if _simplejpeg is not None:
        cs = "GRAY" if img.shape[2] == 1 else "RGB"
        sub = "Gray" if cs == "GRAY" else "420"
        out: bytes = _simplejpeg.encode_jpeg(
            img, quality=quality, colorspace=cs, colorsubsampling=sub
        )
        return out
    buf = io.BytesIO()  # pragma: no cover
    _images._pil().fromarray(img[:, :, 0] if img.shape[2] == 1 else img).save(
        buf, "JPEG", quality=quality
    )
    return buf.getvalue()


def encode_png(image: NDArray[np.generic], *, compress_level: int = 6) -> bytes:
    """PNG bytes of an ``(H, W)`` or ``(H, W, C)`` image, ``C`` in 1..4 (uint8 or uint16,
    of either byte order: 8 or 16 bits; C = 2 is grey + alpha); ``compress_level``:
    zlib's, 0 (none) to 9 (smallest), or -1 (zlib's default)."""
    level: object = compress_level
    if isinstance(level, bool) or not isinstance(level, int | np.integer) or not -1 <= level <= 9:
        # Else Pillow's "codec configuration error", zlib's "Bad compression level".
        raise ConfigError(
            f"PNG compress_level must be an integer in 0..9 (zlib's levels; -1: its "
            f"default) (got {compress_level!r})"
        )
    compress_level = int(compress_level)
    img = np.ascontiguousarray(image)
    if not img.dtype.isnative:  # big-endian samples (FITS, ">u2" buffers): the same image
        img = img.astype(img.dtype.newbyteorder("="))
    if img.ndim == 3 and img.shape[2] == 1:
        img = img[:, :, 0]
    if img.dtype not in (np.uint8, np.uint16) or not (img.ndim == 2 or img.shape[2] in (2, 3, 4)):
        raise ConfigError(
            f"PNG needs a uint8 or uint16 HxW or HxWxC image, C in 1..4 (got {img.dtype} "
            f"{img.shape})"
        )
    _check_size(img, "PNG")
    if img.dtype == np.uint16 and img.ndim == 3:
        return _encode_png16(img, compress_level)
    pil = _images._pil().fromarray(img.astype("<u2") if img.dtype == np.uint16 else img)
    buf = io.BytesIO()
    pil.save(buf, "PNG", compress_level=compress_level)
    return buf.getvalue()


def encode_webp(image: NDArray[np.uint8], *, quality: int | None = None) -> bytes:
    """WebP bytes of an ``(H, W)``, ``(H, W, 1)``, ``(H, W, 3)`` or ``(H, W, 4)`` uint8
    image (grey is stored as RGB, as WebP has no grey): lossless by default, every
    pixel kept (RGB under transparent pixels too); ``quality`` (0-100): lossy."""
    if quality is not None and not 0 <= quality <= 100:
        raise ConfigError(f"WebP quality must be in 0..100 or None, lossless (got {quality=})")
    img = np.ascontiguousarray(image)
    if img.ndim == 3 and img.shape[2] == 1:
        img = img[:, :, 0]
    if img.dtype != np.uint8 or not (img.ndim == 2 or img.shape[2] in (3, 4)):
        raise ConfigError(
            f"WebP needs a uint8 HxW or HxWxC image, C in (1, 3, 4) (got {img.dtype} {img.shape})"
        )
    _check_size(img, "WebP", _WEBP_MAX_SIDE)
    pil = _images._pil().fromarray(img)
    if pil.mode == "L":
        pil = pil.convert("RGB")
    buf = io.BytesIO()
    if quality is None:
        pil.save(buf, "WEBP", lossless=True, exact=True)
    else:
        pil.save(buf, "WEBP", quality=quality)
    return buf.getvalue()


def _png_chunk(kind: bytes, body: bytes) -> bytes:
    crc = zlib.crc32(kind + body)
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)


def _encode_png16(img: NDArray[np.uint16], compress_level: int) -> bytes:
    """A 16-bit grey + alpha, RGB or RGBA PNG, which Pillow cannot write: every
    scanline unfiltered (filter byte 0), big-endian samples, one IDAT chunk."""
    h, w, c = img.shape
    rows = np.zeros((h, 1 + w * c * 2), np.uint8)
    rows[:, 1:] = img.astype(">u2").view(np.uint8).reshape(h, -1)
    colour = {2: 4, 3: 2, 4: 6}[c]
    return (
        _images._PNG_SIG
        + _png_chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 16, colour, 0, 0, 0))
        + _png_chunk(b"IDAT", zlib.compress(rows.tobytes(), compress_level))
        + _png_chunk(b"IEND", b"")
    )
