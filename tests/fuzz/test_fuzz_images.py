"""JPEG and PNG samples: cut at every segment or chunk, flipped, lengths forged.

100 flips a target (250 under ``HEADRACE_FUZZ_ALL=1``): the module took 10.5 s of CPU
alone with 250, 7 s with 100 (2c, 2026-12-07).
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import pytest
from _harness import check
from _mutate import (
    FUZZ_ALL,
    flips,
    forge_fields,
    jpeg_segments,
    png_chunks,
    truncations,
)
from _targets import TARGETS


@pytest.mark.parametrize("target", ["files_jpeg", "files_png", "files_png16"])
def test_images(target: str, tmp_path: Path) -> None:
    data = TARGETS[target].pristine()
    fields = jpeg_segments(data) if target == "files_jpeg" else png_chunks(data)
    cases = truncations(data, [f.at for f in fields])
    cases += flips(data, seed=9, count=250 if FUZZ_ALL else 100)
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
