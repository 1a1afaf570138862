"""JPEG and PNG samples: cut at every segment or chunk, flipped, lengths forged."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import pytest
from _harness import check
from _mutate import Field, flips, forge_fields, truncations
from _targets import TARGETS


def _jpeg_segments(data: bytes) -> list[Field]:
    """Each marker segment's length field (big-endian, after its FFxx marker)."""
    out, at = [], 2
    while at + 4 <= len(data) and data[at] == 0xFF and data[at + 1] != 0xDA:
        (n,) = struct.unpack_from(">H", data, at + 2)
        out.append(Field(f"segment@{at}", at + 2, ">H", n))
        at += 2 + n
    return out


def _png_chunks(data: bytes) -> list[Field]:
    """Each chunk's length field (big-endian), and IHDR's width and height."""
    out, at = [Field("width", 16, ">I", 0), Field("height", 20, ">I", 0)], 8
    while at + 8 <= len(data):
        (n,) = struct.unpack_from(">I", data, at)
        out.append(Field(f"chunk@{at}", at, ">I", n))
        at += 12 + n
    return out


@pytest.mark.parametrize("target", ["files_jpeg", "files_png"])
def test_images(target: str, tmp_path: Path) -> None:
    data = TARGETS[target].pristine()
    fields = _jpeg_segments(data) if target == "files_jpeg" else _png_chunks(data)
    cases = truncations(data, [f.at for f in fields])
    cases += flips(data, seed=9, count=250)
    cases += forge_fields(data, fields)
    seen = check(target, cases, tmp_path)
    assert seen["error:FormatError"] > len(cases) // 3


def test_a_forged_size_allocates_nothing(tmp_path: Path) -> None:
    # An IHDR width forged to 2**31 - 1: the batch's image slots were allocated from
    # the header before any decode, and NumPy raised MemoryError ("Unable to allocate
    # 432. GiB") naming no file. Now no slot is predicted and the decode refuses it.
    from headrace.errors import FormatError
    from headrace.formats import FileSource
    from headrace.formats._image_slots import image_layout
    from headrace.pipeline import Loader

    data = TARGETS["files_png"].pristine()
    forged = data[:16] + struct.pack(">I", 2**31 - 1) + data[20:]
    assert image_layout(forged, fmt="png", mode=None, exif_transpose=False, name="a.png") is None
    # The same with IHDR's CRC-32 made right again (Pillow checks it): a bomb.
    ihdr = forged[12:29]
    resealed = forged[:29] + struct.pack(">I", zlib.crc32(ihdr)) + forged[33:]
    TARGETS["files_png"].companions(tmp_path)
    for png, message in [(forged, "corrupt or truncated PNG"), (resealed, "decompression-bomb")]:
        (tmp_path / "a.png").write_bytes(png)
        source = FileSource(tmp_path, format="png")
        with Loader(source, batch_size=3, seed=0, prefetch=0) as loader:
            with pytest.raises(FormatError, match=rf"a\.png: .*{message}"):
                next(iter(loader))
