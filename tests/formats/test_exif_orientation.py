"""EXIF orientation: JPEGs as stored by default; turned upright with exif_transpose=True,
as Pillow's ImageOps.exif_transpose turns them, on both decode paths."""

from __future__ import annotations

import io
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image, ImageOps

from headrace.errors import ConfigError
from headrace.formats import FileSource, decode_jpeg

# Not square, and no symmetry: every one of the 8 orientations gives other pixels.
_PIXELS = np.clip(
    np.add.outer(np.arange(24) * 9, np.arange(40) * 4)[:, :, None]
    + np.array([0, 60, 120])
    + np.random.default_rng(11).integers(0, 12, (24, 40, 3)),
    0,
    255,
).astype(np.uint8)
PATHS = pytest.mark.parametrize("simplejpeg", [True, False], ids=["simplejpeg", "pillow"])


def _jpeg(exif: bytes | None, pixels: np.ndarray[Any, Any] = _PIXELS) -> bytes:
    buf = io.BytesIO()
    options: dict[str, Any] = {"quality": 92} if exif is None else {"quality": 92, "exif": exif}
    Image.fromarray(pixels).save(buf, "JPEG", **options)
    return buf.getvalue()


def _exif(orientation: int) -> bytes:
    """EXIF as Pillow writes it (big-endian, "MM")."""
    exif = Image.Exif()
    exif[0x0112] = orientation
    return exif.tobytes()


def _exif_little_endian(orientation: int, value_type: int = 3) -> bytes:
    """The same tag as cameras often write it: "II" (little-endian), a SHORT or a LONG."""
    value = (
        struct.pack("<HH", orientation, 0) if value_type == 3 else struct.pack("<I", orientation)
    )
    entry = struct.pack("<HHI", 0x0112, value_type, 1) + value
    return b"Exif\0\0II*\0" + struct.pack("<I", 8) + struct.pack("<H", 1) + entry + b"\0\0\0\0"


def _upright(data: bytes, mode: str = "RGB") -> np.ndarray[Any, Any]:
    """The reference: Pillow's decode, turned by ImageOps.exif_transpose."""
    with Image.open(io.BytesIO(data)) as img:
        out = np.asarray(ImageOps.exif_transpose(img).convert(mode))
    return out[:, :, None] if out.ndim == 2 else out


@PATHS
@pytest.mark.parametrize("orientation", range(1, 9))
@pytest.mark.parametrize("mode", [None, "L", "RGBA"])
def test_each_orientation_is_turned_as_pillow_turns_it(
    simplejpeg: bool, orientation: int, mode: str | None
) -> None:
    data = _jpeg(_exif(orientation))
    got = decode_jpeg(
        data,
        name="phone.jpg",
        use_simplejpeg=simplejpeg,
        mode=mode,  # type: ignore[arg-type]
        exif_transpose=True,
    )
    want = _upright(data, mode or "RGB")
    assert got.flags.c_contiguous and got.dtype == np.uint8
    assert got.shape == want.shape  # 5-8 swap height and width
    np.testing.assert_array_equal(got, want)
    as_stored = decode_jpeg(data, name="phone.jpg", use_simplejpeg=simplejpeg, mode=mode)  # type: ignore[arg-type]
    assert as_stored.shape[:2] == (24, 40)  # off by default, as Pillow and torchvision
    if orientation == 1:
        np.testing.assert_array_equal(got, as_stored)


@PATHS
@pytest.mark.parametrize("value_type", [3, 4], ids=["short", "long"])
def test_little_endian_exif_and_a_long_value(simplejpeg: bool, value_type: int) -> None:
    data = _jpeg(_exif_little_endian(6, value_type))
    got = decode_jpeg(data, name="cam.jpg", use_simplejpeg=simplejpeg, exif_transpose=True)
    stored = decode_jpeg(data, name="cam.jpg", use_simplejpeg=simplejpeg)
    np.testing.assert_array_equal(got, np.rot90(stored, k=-1))  # 6: 90 degrees clockwise
    if value_type == 3:
        np.testing.assert_array_equal(got, _upright(data))


# Pillow warns of EXIF it cannot read (on its path, with or without exif_transpose);
# the warning follows the process's filters, and this test is about the pixels.
@pytest.mark.filterwarnings("ignore:Corrupt EXIF data:UserWarning")
@PATHS
@pytest.mark.parametrize(
    "exif",
    [
        None,  # no EXIF at all
        _exif(0),  # out of range: Pillow leaves these as stored too
        _exif(9),
        b"Exif\0\0II*\0" + struct.pack("<I", 4000),  # IFD offset past the segment
        b"Exif\0\0MM\0*\0\0\0\x08\0\x05" + b"\x01\x12",  # entries cut short
        b"Exif\0\0XX*\0\0\0\0\x08",  # no byte order
    ],
    ids=["none", "zero", "nine", "offset-past-end", "cut-short", "bad-byte-order"],
)
def test_no_or_unreadable_orientation_leaves_pixels_as_stored(
    simplejpeg: bool, exif: bytes | None
) -> None:
    data = _jpeg(exif)
    got = decode_jpeg(data, name="x.jpg", use_simplejpeg=simplejpeg, exif_transpose=True)
    np.testing.assert_array_equal(got, decode_jpeg(data, name="x.jpg", use_simplejpeg=simplejpeg))


def test_file_source_turns_jpegs_upright_when_asked(tmp_path: Path) -> None:
    for o in range(1, 9):
        (tmp_path / f"{o}.jpg").write_bytes(_jpeg(_exif(o)))
    src = FileSource(tmp_path, format="jpeg", exif_transpose=True, shuffle="none")
    for i, o in enumerate(range(1, 9)):
        image = src.read(0, np.array([i]))["image"][0]
        np.testing.assert_array_equal(image, _upright((tmp_path / f"{o}.jpg").read_bytes()))
    src.close()
    plain = FileSource(tmp_path, format="jpeg", shuffle="none")
    assert plain.read(0, np.arange(8))["image"].shape == (8, 24, 40, 3)  # all as stored
    assert (
        plain.fingerprint()
        != FileSource(tmp_path, format="jpeg", exif_transpose=True).fingerprint()
    )
    plain.close()


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"format": "png"}, r"exif_transpose turns JPEGs and WebPs upright; png files"),
        ({"format": "npy"}, r"exif_transpose turns JPEGs and WebPs upright; npy files"),
        ({"format": "jpeg", "decode": False}, r"exif_transpose=True turns decoded pixels"),
        ({"format": "jpeg", "exif_transpose": 1}, r"exif_transpose must be True or False"),
    ],
)
def test_exif_transpose_is_refused_where_it_means_nothing(
    tmp_path: Path, options: dict[str, Any], match: str
) -> None:
    from headrace.formats import FileSourceConfig

    with pytest.raises(ConfigError, match=match):
        FileSourceConfig(**{"exif_transpose": True, **options})
