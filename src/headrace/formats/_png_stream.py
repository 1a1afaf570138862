"""A PNG's image data checked: its IDAT chunks' CRC-32 (and a palette image's PLTE)
always, its zlib stream whole where Pillow is told to accept truncation.

Pillow checks the CRC-32 of the chunks before the image data, never IDAT's (it reads
the four bytes and drops them), and stops inflating once it has its scanlines, before
zlib's Adler-32: of the bits flipped in the compressed data, as a bad disk or copy
flips them, about one in 85 decoded to other pixels without an error (106 of 8,940
single-bit flips of one small file). :func:`check_png_crcs` checks each IDAT chunk's
CRC-32 as libpng does: 0.49 ms of a 7.35 ms decode of a 512 x 512 RGB PNG (500 KB),
6.7%, measured on 2 shared cores.

``PIL.ImageFile.LOAD_TRUNCATED_IMAGES = True``, a line many training scripts carry to
get past broken files, makes Pillow fill the rest of a PNG whose compressed data stops
early with zeros, and return it: a damaged image read as a good one, which no
``on_corrupt`` setting sees. The flag is process-wide and read at every decode, so
headrace cannot unset it for its own (its decode threads run beside the caller's code).
Where it is set, the image data is inflated here first: its zlib stream must end (its
Adler-32 checked) and hold exactly the scanlines its IHDR says. A second inflate, paid
only under the flag; without it Pillow raises on a stream cut short itself. A stream
that ends whole but holds fewer scanlines than IHDR says (an encoder's bug: its CRCs
are good) Pillow fills with zeros under no flag, and that is not checked: the second
inflate costs about half a decode (6 ms of 11 ms, 512 x 512 RGB, 2 shared cores).
Instead, :func:`held_back` gives Pillow the file less the stream's last byte (one of
its Adler-32's, which no scanline needs: Pillow stops inflating at the last one): a
whole image still reads whole, and one whose stream ends before its last scanline
runs out of data instead, which Pillow calls truncated (a copy of the compressed
bytes, microseconds).
"""

from __future__ import annotations

import struct
import zlib

from headrace._messages import RECOPY
from headrace.errors import FormatError

__all__ = ["check_png_crcs", "check_png_stream", "held_back"]

# Channels by IHDR colour type (3: palette indices).
_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}
# Adam7's passes: (x start, y start, x step, y step).
_ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2),
          (0, 1, 1, 2))  # fmt: skip
_PIECE = 1 << 20
# IHDR's colour type byte (after width, height and bit depth), and a palette's.
_COLOUR_TYPE = 9
_PALETTE = 3
# The bit depths each IHDR colour type allows (the PNG specification's table 11.1).
_DEPTHS = {
    0: ("grey", (1, 2, 4, 8, 16)),
    2: ("RGB", (8, 16)),
    3: ("palette", (1, 2, 4, 8)),
    4: ("grey + alpha", (8, 16)),
    6: ("RGBA", (8, 16)),
}


def _scanline_bytes(width: int, height: int, depth: int, colour: int, interlace: int) -> int:
    """The inflated size of a PNG's image data: each pass's rows, a filter byte each."""
    bits = depth * _CHANNELS.get(colour, 0)

    def size(w: int, h: int) -> int:
        return h * (1 + (w * bits + 7) // 8) if w and h else 0

    if not interlace:
        return size(width, height)
    return sum(
        size(-(-(width - x) // dx), -(-(height - y) // dy))
        for x, y, dx, dy in _ADAM7
        if width > x and height > y
    )


def _check_header(ihdr: memoryview, name: str) -> None:
    """Refuse an IHDR of values no PNG has, naming the field (Pillow says "not identified
    by this driver", or for a compression method "image file is truncated")."""
    width, height, depth, colour, compression, filters, interlace = struct.unpack_from(
        ">IIBBBBB", ihdr
    )
    what = None
    if not width or not height:
        what = f"width {width}" if not width else f"height {height}"
    elif colour not in _DEPTHS:
        what = f"colour type {colour}, not one of {', '.join(map(str, _DEPTHS))}"
    elif depth not in _DEPTHS[colour][1]:
        label, depths = _DEPTHS[colour]
        what = (
            f"bit depth {depth} for colour type {colour} ({label}), which allows "
            f"{', '.join(map(str, depths))}"
        )
    elif compression:
        what = f"compression method {compression}, not 0"
    elif filters:
        what = f"filter method {filters}, not 0"
    elif interlace > 1:
        what = f"interlace method {interlace}, not 0 or 1 (Adam7)"
    if what is not None:
        raise FormatError(f"{name}: corrupt PNG: its IHDR says {what}: {RECOPY}")


def check_png_crcs(view: memoryview, name: str) -> int | None:
    """Refuse ``view`` (a PNG, its signature and IEND checked) where an IDAT chunk's
    CRC-32 is not its bytes', its IHDR holds values no PNG has, or a palette image has
    no PLTE chunk before its image data (Pillow makes up a grey palette; libpng refuses
    it). Chunks cut short are left to the decoder, which names them. Returns where the
    last IDAT chunk that holds data starts (``None``: none), for :func:`held_back`."""
    pos, size = 8, len(view)
    palette = False  # a palette image (IHDR colour type 3) with no PLTE chunk yet
    last = None
    while pos + 12 <= size:
        length, kind = struct.unpack_from(">I4s", view, pos)
        end = pos + 8 + length
        if end + 4 > size:
            return last
        if kind == b"IHDR" and length >= 13:
            _check_header(view[pos + 8 : pos + 21], name)
            palette = view[pos + 8 + _COLOUR_TYPE] == _PALETTE
        elif kind == b"PLTE":
            palette = False
        elif kind == b"IDAT":
            if palette:
                raise FormatError(
                    f"{name}: corrupt PNG: a palette image (IHDR colour type 3) with no PLTE "
                    f"chunk before its image data (byte {pos}), so no colours for its "
                    f"indices: {RECOPY}"
                )
            (stored,) = struct.unpack_from(">I", view, end)
            actual = zlib.crc32(view[pos + 8 : end], zlib.crc32(kind))
            if actual != stored:
                raise FormatError(
                    f"{name}: corrupt or truncated PNG (the IDAT chunk at byte {pos}, "
                    f"{length} bytes of image data, has CRC-32 {stored:08x}; its bytes give "
                    f"{actual:08x}): {RECOPY}"
                )
            if length:
                last = pos
        elif kind == b"IEND":
            return last
        pos = end + 4
    return last


def held_back(view: memoryview, at: int | None) -> memoryview:
    """``view`` (a PNG) for Pillow to decode: the IDAT chunk at ``at`` (the last that
    holds data, from :func:`check_png_crcs`) one byte shorter, its last byte left out.

    Pillow's inflater stops where the zlib stream ends: at a scanline's end it keeps
    the rows so far, zeros the rest and raises nothing, ``LOAD_TRUNCATED_IMAGES`` or
    not (a whole stream of too few scanlines: a writer's bug, its CRCs good). A
    stream's last byte is its Adler-32's, after every scanline, which Pillow stops
    before: with it left out a whole image reads the same, and a stream that ends
    early runs out before the image is full, which Pillow refuses as truncated.
    (The chunk's CRC-32, checked already, is left as it was: Pillow skips IDAT's.)"""
    if at is None:
        return view
    (length,) = struct.unpack_from(">I", view, at)
    end = at + 8 + length
    return memoryview(
        b"".join((view[:at], struct.pack(">I", length - 1), view[at + 4 : end - 1], view[end:]))
    )


def check_png_stream(view: memoryview, name: str) -> None:
    """Refuse ``view`` (a PNG, its signature and IEND checked) unless its IDAT chunks
    inflate to a whole zlib stream of exactly the scanlines IHDR promises."""
    inflater = zlib.decompressobj()
    pos, got, want = 8, 0, None
    try:
        while pos + 8 <= len(view):
            length, kind = struct.unpack_from(">I4s", view, pos)
            body = view[pos + 8 : pos + 8 + length]
            pos += 12 + length
            if kind == b"IHDR" and len(body) >= 13:
                want = _scanline_bytes(*struct.unpack_from(">IIBBxxB", body))
            elif kind == b"IDAT":
                data: bytes | memoryview = body
                while data and not inflater.eof:
                    got += len(inflater.decompress(data, _PIECE))
                    data = inflater.unconsumed_tail
            elif kind == b"IEND":
                break
    except zlib.error as exc:
        raise FormatError(f"{name}: corrupt PNG image data ({exc})") from exc
    if not inflater.eof:
        raise FormatError(
            f"{name}: truncated PNG image data: its zlib stream stops after {got} bytes of "
            f"scanlines, without its end{'' if want is None else f' ({want} expected)'}"
        )
    if want is not None and got != want:
        raise FormatError(
            f"{name}: corrupt PNG image data: {got} bytes of scanlines, its IHDR says {want}"
        )
