"""PNGs written by hand: the bit depths, filters and interlacing Pillow cannot write.

Pillow writes 16-bit grey only, and filters every scanline as zlib compresses best,
so a decoder's unfiltering of 16-bit colour (two bytes a sample, six or eight a
pixel) needs files written here: ``png_bytes(a, colour, filtered=True)`` uses the
five PNG filters in turn, one a scanline (the spec's definitions, on the bytes).
"""

from __future__ import annotations

import struct
import zlib
from typing import Any

import numpy as np

__all__ = ["ADAM7", "png_bytes"]

#: Adam7's passes: (x start, y start, x step, y step).
ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2),
         (0, 1, 1, 2)]  # fmt: skip


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def _paeth(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any], c: np.ndarray[Any, Any]) -> Any:
    p = a + b - c
    pa, pb, pc = np.abs(p - a), np.abs(p - b), np.abs(p - c)
    return np.where((pa <= pb) & (pa <= pc), a, np.where(pb <= pc, b, c))


def _scanlines(sub: np.ndarray[Any, Any], filtered: bool) -> bytes:
    """``sub``'s rows, each with its filter byte: 0 (none), or 0-4 in turn."""
    h = sub.shape[0]
    lines = np.ascontiguousarray(sub).view(np.uint8).reshape(h, -1).astype(np.int32)
    bpp = max(1, lines.shape[1] // max(1, sub.shape[1]))  # bytes a pixel
    out = []
    prev = np.zeros(lines.shape[1], np.int32)
    for y in range(h):
        x = lines[y]
        left = np.concatenate([np.zeros(bpp, np.int32), x[:-bpp]])
        upleft = np.concatenate([np.zeros(bpp, np.int32), prev[:-bpp]])
        kind = y % 5 if filtered else 0
        pred = [0, left, prev, (left + prev) // 2, _paeth(left, prev, upleft)][kind]
        out.append(bytes([kind]) + ((x - pred) % 256).astype(np.uint8).tobytes())
        prev = x
    return b"".join(out)


def png_bytes(
    a: np.ndarray[Any, Any], color_type: int, *, interlace: bool = False, filtered: bool = False
) -> bytes:
    """A PNG of ``a`` (``(H, W)`` or ``(H, W, C)``, uint8 or uint16: 8 or 16 bits),
    colour type ``color_type``; ``interlace``: Adam7; ``filtered``: filters 0-4 in turn."""
    h, w = a.shape[:2]
    depth = 16 if a.dtype == np.uint16 else 8
    rows = a.astype(">u2") if depth == 16 else a
    if interlace:
        raw = b"".join(
            _scanlines(rows[y::dy, x::dx], filtered)
            for x, y, dx, dy in ADAM7
            if rows[y::dy, x::dx].size
        )
    else:
        raw = _scanlines(rows, filtered)
    ihdr = struct.pack(">IIBBBBB", w, h, depth, color_type, 0, 0, int(interlace))
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", ihdr)
        + _chunk(b"IDAT", zlib.compress(raw))
        + _chunk(b"IEND", b"")
    )
