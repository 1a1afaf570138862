"""Under ``format="image"`` (JPEG, PNG and WebP together), a damaged ``.png`` or ``.webp``
is named as what its name says it should be: an empty or garbled ``x.png`` was told
"not a JPEG (nor a PNG)" (the JPEG decoder reads every image of the set), which sent the
user looking for a JPEG."""

from __future__ import annotations

import io
import logging
from pathlib import Path

import numpy as np
import pytest

from headrace.errors import FormatError
from headrace.formats import FileSource

Image = pytest.importorskip("PIL.Image")

GARBLED = b"hello world" * 5


def _encoded(fmt: str) -> bytes:
    out = io.BytesIO()
    Image.fromarray(np.full((8, 8, 3), 7, np.uint8)).save(out, format=fmt)
    return out.getvalue()


@pytest.mark.parametrize(
    ("name", "data", "said"),
    [
        ("x.png", b"", "x.png: an empty file (0 bytes), not a PNG: an interrupted copy"),
        (
            "x.png",
            GARBLED,
            "x.png: not a PNG (nor a JPEG or WebP): starts with b'hello wo', expected "
            "b'\\x89PNG\\r\\n\\x1a\\n'",
        ),
        ("x.webp", b"", "x.webp: an empty file (0 bytes), not a WebP: an interrupted copy"),
        (
            "x.WEBP",
            GARBLED,
            "x.WEBP: not a WebP (nor a JPEG or PNG): starts with b'hello worldh', expected "
            "b'RIFF', a size, b'WEBP'",
        ),
        # A .jpg as before (tests/formats/test_file_variants.py pins it).
        ("x.jpg", b"", "x.jpg: an empty file (0 bytes), not a JPEG: an interrupted copy"),
        ("x.jpg", GARBLED, "x.jpg: not a JPEG (nor a PNG): starts with b'hell'"),
    ],
)
def test_a_damaged_image_is_named_as_its_extension_says(
    tmp_path: Path, name: str, data: bytes, said: str
) -> None:
    folder = tmp_path / "cls"
    folder.mkdir()
    for fmt, ext in (("JPEG", "jpg"), ("PNG", "png"), ("WEBP", "webp")):
        (folder / f"good.{ext}").write_bytes(_encoded(fmt))
    (folder / name).write_bytes(data)
    src = FileSource(str(tmp_path), format="image")
    with pytest.raises(FormatError) as got:
        src.read(0, np.arange(len(src.files), dtype=np.int64))
    assert said in str(got.value)
    src.close()


def test_replaced_png_is_listed_as_a_png(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    for i in range(10):
        (tmp_path / f"{i}.png").write_bytes(_encoded("PNG"))
        (tmp_path / f"{i}.jpg").write_bytes(_encoded("JPEG"))
    (tmp_path / "3.png").write_bytes(b"")
    src = FileSource(str(tmp_path), format="image", on_corrupt="replace", max_corrupt=0.1)
    with caplog.at_level(logging.WARNING, logger="headrace"):
        src.read(0, np.arange(len(src.files), dtype=np.int64))
    why = src.corrupt_files[str(tmp_path / "3.png")]
    assert "not a PNG" in why and "JPEG" not in why, why
    src.close()
