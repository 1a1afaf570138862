"""PNG edges: image data whose CRC-32 does not match (Pillow never checks IDAT's)."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from _png_files import png_bytes
from headrace.errors import FormatError
from headrace.formats import TableSource, decode_jpeg, decode_png

RNG = np.random.default_rng(47)


def chunks(data: bytes) -> list[tuple[int, bytes, bytes]]:
    """Each chunk of a PNG: (offset, type, body)."""
    out, pos = [], 8
    while pos < len(data):
        length, kind = struct.unpack_from(">I4s", data, pos)
        out.append((pos, kind, data[pos + 8 : pos + 8 + length]))
        pos += 12 + length
    return out


def with_idat(data: bytes, body: bytes, crc: int) -> bytes:
    """``data`` with its (single) IDAT chunk's body and CRC replaced."""
    ((at, _, old),) = [c for c in chunks(data) if c[1] == b"IDAT"]
    idat = struct.pack(">I", len(body)) + b"IDAT" + body + struct.pack(">I", crc)
    return data[:at] + idat + data[at + 12 + len(old) :]


def test_image_data_whose_crc_does_not_match_is_refused_naming_the_file() -> None:
    # Another image's compressed scanlines under this file's CRC: a whole zlib stream,
    # so Pillow, which skips IDAT's CRC, decoded the other pixels as this file's.
    a, b = RNG.integers(0, 256, (2, 6, 5, 3), dtype=np.uint8)
    png_a, png_b = png_bytes(a, 2), png_bytes(b, 2)
    [(_, _, body_a)] = [c for c in chunks(png_a) if c[1] == b"IDAT"]
    [(_, _, body_b)] = [c for c in chunks(png_b) if c[1] == b"IDAT"]
    swapped = with_idat(png_a, body_b, zlib.crc32(b"IDAT" + body_a))
    for decode in (decode_png, decode_jpeg):  # a PNG named .jpg is checked the same
        with pytest.raises(
            FormatError,
            match=r"^a\.png: corrupt or truncated PNG \(the IDAT chunk at byte 33, .* has CRC-32",
        ):
            decode(swapped, name="a.png")
    # The same bytes with their own CRC are an image, b's.
    resealed = with_idat(png_a, body_b, zlib.crc32(b"IDAT" + body_b))
    assert np.array_equal(decode_png(resealed, name="a.png"), b)


def test_every_bit_flipped_in_image_data_is_refused_or_changes_nothing() -> None:
    a = RNG.integers(0, 4, (6, 8, 3), dtype=np.uint8)
    data = png_bytes(a, 2, filtered=True)
    [(at, _, body)] = [c for c in chunks(data) if c[1] == b"IDAT"]
    refused = 0
    for i in range(at + 8, at + 8 + len(body)):
        flipped = bytearray(data)
        flipped[i] ^= 0x04
        try:
            got = decode_png(bytes(flipped), name="f.png")
        except FormatError as exc:
            assert str(exc).startswith("f.png: ")
            refused += 1
        else:
            assert np.array_equal(got, a), f"a flip at byte {i} gave other pixels"
    assert refused == len(body)


@pytest.mark.parametrize("threads", [0, 2])
def test_a_table_row_whose_image_data_is_damaged_is_named(tmp_path: Path, threads: int) -> None:
    images = list(RNG.integers(0, 256, (4, 6, 5, 3), dtype=np.uint8))
    rows = [png_bytes(a, 2) for a in images]
    [(at, _, body)] = [c for c in chunks(rows[2]) if c[1] == b"IDAT"]
    damaged = bytearray(rows[2])
    damaged[at + 8 + len(body) // 2] ^= 0x01  # one bit, as a bad disk flips it
    rows[2] = bytes(damaged)
    pq.write_table(pa.table({"img": pa.array(rows, pa.binary())}), tmp_path / "t.parquet")
    src = TableSource(tmp_path / "t.parquet", images=["img"], shuffle=False, decode_threads=threads)
    got = src.read(0, np.array([0, 1, 3], dtype=np.int64))["img"]
    assert np.array_equal(got, np.stack([images[0], images[1], images[3]]))
    with pytest.raises(FormatError, match=r"column 'img', row 2 .*IDAT chunk at byte 33"):
        src.read(0, np.arange(4, dtype=np.int64))
    src.close()
