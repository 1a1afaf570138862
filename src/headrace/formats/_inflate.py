"""A deflated zip member inflated piece by piece, its length and CRC-32 checked.

``zlib.decompress`` (and one ``decompressobj().decompress`` call) builds its
output in blocks and joins them at the end: inflating a 16 MiB NPZ member that
way peaked at 32 MiB, twice the array. Here the caller's ``sink`` takes each
piece (at most ``OUT`` bytes) where it belongs (into the array, or only the
rows a read asks), so the peak is what the sink keeps plus one piece.
Compressed input is fed ``IN`` bytes at a time: a call given all of it keeps
a copy of what it did not consume (``unconsumed_tail``), a copy a call.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

from headrace._messages import RECOPY
from headrace.errors import FormatError

__all__ = ["MOST_RATIO", "inflate"]

#: The most bytes deflate makes of one compressed byte: a 258-byte match coded in 2 bits
#: (zlib's FAQ: 1032:1). A zip directory that claims more is damaged or forged.
MOST_RATIO = 1032
#: The most bytes one step inflates.
OUT = 1 << 20
#: Compressed bytes fed at a time.
IN = 64 << 10


def inflate(
    raw: memoryview, size: int, crc: int, where: str, sink: Callable[[int, bytes], None]
) -> None:
    """Inflate the raw deflate stream ``raw``, giving ``sink(offset, piece)`` each piece in
    order; ``size`` and ``crc``: what the zip directory says of the member (a
    :class:`FormatError` naming ``where`` when the stream is damaged, ends early, or
    holds other bytes)."""
    inflater = zlib.decompressobj(-zlib.MAX_WBITS)
    pos = fed = 0
    got = 0
    tail = b""
    try:
        while not inflater.eof:
            if tail:
                data: bytes | memoryview = tail
            else:
                data = raw[fed : fed + IN]
                fed += len(data)
            piece = inflater.decompress(data, OUT)
            tail = inflater.unconsumed_tail
            if not piece:
                if not data:  # nothing in, nothing out: the stream stops unfinished
                    break
                continue
            if pos + len(piece) > size:
                raise FormatError(
                    f"{where}: corrupt: directory says {size} bytes uncompressed, found "
                    f"{pos + len(piece)} or more: {RECOPY}"
                )
            sink(pos, piece)
            got = zlib.crc32(piece, got)
            pos += len(piece)
    except zlib.error as exc:
        raise FormatError(f"{where}: corrupt deflate stream ({exc}): {RECOPY}") from exc
    if not inflater.eof:
        raise FormatError(
            f"{where}: truncated or corrupt deflate stream: inflated {pos} bytes "
            f"without reaching its end (directory says {size}): {RECOPY}"
        )
    if pos != size:
        raise FormatError(
            f"{where}: corrupt: directory says {size} bytes uncompressed, found {pos}: {RECOPY}"
        )
    if got != crc:
        raise FormatError(
            f"{where}: corrupt: CRC-32 is {got:08x}, directory says {crc:08x}: {RECOPY}"
        )
