"""WebP still images: decoded as Pillow (libwebp) decodes them, in FileSource folders,
WebDataset tar members and table image columns; damage, trailing bytes and animations
refused by name."""

from __future__ import annotations

import io
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image, ImageOps

from _tar_shards import write as write_tar
from headrace.errors import ConfigError, FormatError
from headrace.formats import (
    FileSource,
    TableSource,
    decode_jpeg,
    decode_png,
    decode_webp,
    encode_webp,
)
from headrace.formats._image_slots import image_layout
from headrace.formats._webp import webp_layout
from headrace.pipeline import Loader
from headrace.testing import assert_resume_exact, batch_digest

RNG = np.random.default_rng(7)


def pixels(h: int, w: int, c: int) -> np.ndarray[Any, Any]:
    return RNG.integers(0, 256, (h, w, c), dtype=np.uint8)


def pil_save(a: np.ndarray[Any, Any], **kw: Any) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(a[:, :, 0] if a.shape[2] == 1 else a).save(buf, "WEBP", **kw)
    return buf.getvalue()


def pillow(data: bytes, mode: str | None = None) -> np.ndarray[Any, Any]:
    img = Image.open(io.BytesIO(data))
    out = np.asarray(img if mode is None else img.convert(mode))
    return out[:, :, None] if out.ndim == 2 else out


def kinds() -> dict[str, bytes]:
    """One file of each kind of WebP: lossless (VP8L) RGB and RGBA, lossy (VP8) RGB,
    lossy with alpha (VP8X + ALPH)."""
    rgba = pixels(9, 13, 4)
    return {
        "lossless-rgb": encode_webp(pixels(9, 13, 3)),
        "lossless-rgba": encode_webp(rgba),
        "lossy-rgb": encode_webp(pixels(11, 6, 3), quality=70),
        "lossy-rgba": encode_webp(rgba, quality=70),
    }


def test_lossless_round_trip_keeps_every_pixel() -> None:
    for c in (3, 4):
        a = pixels(17, 5, c)
        a[0, 0, -1] = 0  # RGB under a transparent pixel kept too (exact=True)
        got = decode_webp(encode_webp(a), name="x.webp")
        assert got.dtype == np.uint8 and np.array_equal(got, a)
    grey = pixels(4, 6, 1)
    assert np.array_equal(decode_webp(encode_webp(grey), name="g"), np.repeat(grey, 3, axis=2))


@pytest.mark.parametrize("mode", [None, "L", "LA", "RGB", "RGBA"])
def test_every_kind_decodes_as_pillow_does(mode: str | None) -> None:
    for kind, data in kinds().items():
        got = decode_webp(data, name=kind, mode=mode)  # type: ignore[arg-type]
        want = pillow(data, mode)
        assert got.shape == want.shape and np.array_equal(got, want), kind
        assert got.shape[2] == (len(mode) if mode else 4 if "rgba" in kind else 3)
        assert webp_layout(data, mode=mode) == (got.shape, np.dtype(np.uint8))  # type: ignore[arg-type]


def test_decode_into_out_and_a_wrong_out_is_left_alone() -> None:
    data = kinds()["lossy-rgb"]
    out = np.empty((11, 6, 3), np.uint8)
    assert decode_webp(data, name="x", out=out) is out
    assert np.array_equal(out, pillow(data))
    other = np.zeros((3, 3, 3), np.uint8)
    got = decode_webp(data, name="x", out=other)
    assert got is not other and not np.shares_memory(got, other) and not other.any()


def _with_exif(a: np.ndarray[Any, Any], orientation: int) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return pil_save(a, lossless=True, exif=exif.tobytes())


@pytest.mark.parametrize("orientation", [1, 3, 6, 8])
def test_exif_orientation_turns_as_pillow_does(orientation: int) -> None:
    data = _with_exif(pixels(5, 9, 3), orientation)
    upright = np.asarray(ImageOps.exif_transpose(Image.open(io.BytesIO(data))))
    got = decode_webp(data, name="x", exif_transpose=True)
    assert np.array_equal(got, upright)
    assert webp_layout(data, exif_transpose=True) == (got.shape, np.dtype(np.uint8))
    assert np.array_equal(decode_webp(data, name="x"), pillow(data))  # as stored by default


def _riff(chunks: bytes) -> bytes:
    """A WebP file of ``chunks``: the RIFF header around them, its size consistent."""
    return b"RIFF" + struct.pack("<I", 4 + len(chunks)) + b"WEBP" + chunks


def test_damage_is_refused_naming_the_file() -> None:
    data = kinds()["lossy-rgba"]
    cases = {
        "cut": (data[:-7], "truncated WebP: its RIFF header says"),
        "tail": (data + b"\0\0", "2 bytes of other data after its RIFF container"),
        "empty": (b"", "an empty file"),
        "header": (data[:10], "not a WebP"),
    }
    # A chunk whose length runs past the end (the RIFF size kept consistent).
    bad = bytearray(data)
    struct.pack_into("<I", bad, 16, len(data))
    cases["chunk"] = (bytes(bad), "runs past the end of the file")
    # A lossless stream whose signature byte is damaged.
    lossless = bytearray(kinds()["lossless-rgb"])
    lossless[20] ^= 0xFF
    cases["vp8l"] = (bytes(lossless), "no VP8L header")
    # A lossy frame whose start code is damaged.
    lossy = bytearray(kinds()["lossy-rgb"])
    assert lossy[12:16] == b"VP8 "
    lossy[23] ^= 0xFF  # the payload's bytes 3-5: the start code 9d 01 2a
    cases["vp8"] = (bytes(lossy), "no VP8 frame header")
    # An extended header (VP8X) of fewer than its 10 bytes.
    assert data[12:16] == b"VP8X"
    short = data[:12] + b"VP8X" + struct.pack("<I", 4) + data[20:24]
    cases["vp8x"] = (_riff(short[12:]), "a VP8X chunk of 4 bytes")
    # Chunks that end two bytes before the file does: no room for a chunk's header.
    cases["stub"] = (_riff(data[12:] + b"AB"), "a chunk header cut at byte")
    # Chunks of neither kind of frame.
    cases["none"] = (_riff(b"XYZW" + struct.pack("<I", 2) + b"hi"), "no VP8, VP8L or VP8X chunk")
    for case, (blob, says) in cases.items():
        with pytest.raises(FormatError, match=r"bad\.webp") as info:
            decode_webp(blob, name="bad.webp")
        assert says in str(info.value), (case, info.value)
        assert webp_layout(blob) is None


def test_damaged_image_data_is_a_format_error() -> None:
    # Sizes consistent, the frame's data zeroed: libwebp refuses it; Pillow's OSError
    # comes as a FormatError naming the file.
    data = bytearray(kinds()["lossless-rgb"])
    data[25:] = bytes(len(data) - 25)
    with pytest.raises(FormatError, match=r"bad\.webp: corrupt or truncated WebP"):
        decode_webp(bytes(data), name="bad.webp")


def test_an_animation_is_refused() -> None:
    a, b = pixels(4, 4, 3), pixels(4, 4, 3)
    buf = io.BytesIO()
    Image.fromarray(a).save(
        buf, "WEBP", save_all=True, append_images=[Image.fromarray(b)], lossless=True
    )
    with pytest.raises(FormatError, match=r"anim\.webp: an animated WebP"):
        decode_webp(buf.getvalue(), name="anim.webp")
    assert webp_layout(buf.getvalue()) is None


def test_other_formats_say_where_a_webp_goes() -> None:
    data = kinds()["lossless-rgba"]
    with pytest.raises(FormatError, match="it is a WebP image: read the set with format='webp'"):
        decode_png(data, name="x.png")
    # Named .jpg: read by its bytes, to the JPEG schema's RGB (as Pillow, torchvision).
    assert np.array_equal(decode_jpeg(data, name="x.jpg"), pillow(data, "RGB"))
    assert image_layout(data, fmt="jpeg", mode=None, exif_transpose=False, name="x") == (
        (9, 13, 3),
        np.dtype(np.uint8),
    )


def _folder(root: Path, n: int = 12) -> list[bytes]:
    root.mkdir()
    blobs = []
    for i in range(n):
        a = pixels(7, 5, 4 if i % 3 == 0 else 3)
        blob = encode_webp(a, quality=None if i % 2 else 60)
        (root / f"{i:03d}.webp").write_bytes(blob)
        blobs.append(blob)
    return blobs


def test_a_folder_reads_the_same_whatever_the_threads_or_mode(tmp_path: Path) -> None:
    blobs = _folder(tmp_path / "d")
    digests = set()
    for options in (
        {"decode_threads": 0},
        {"decode_threads": 4},
        {"mode": "map-style"},
    ):
        src = FileSource(tmp_path / "d", format="webp", image_mode="RGB", **options)
        with Loader(src, batch_size=4, seed=3) as loader:
            batches = [b for _, b in zip(range(6), loader, strict=False)]
        for b in batches:
            assert b["image"].shape == (4, 7, 5, 3)
            for k, img in zip(b["index"].tolist(), b["image"], strict=True):
                assert np.array_equal(img, pillow(blobs[k], "RGB"))
        digests.add(batch_digest(batches))
    assert len(digests) == 1
    # As stored: RGB and RGBA files side by side are ragged, each as Pillow opens it.
    src = FileSource(tmp_path / "d", format="webp")
    with Loader(src, batch_size=6, seed=0) as loader:
        b = next(iter(loader))
    for k, img in zip(b["index"].tolist(), b["image"], strict=True):
        assert np.array_equal(img, pillow(blobs[k]))
    assert_resume_exact(
        lambda: Loader(FileSource(tmp_path / "d", format="webp"), batch_size=3, seed=5),
        steps=8,
        resume_at=[1, 4, 5],
    )


def test_a_damaged_file_in_a_folder_is_named(tmp_path: Path) -> None:
    _folder(tmp_path / "d", 4)
    (tmp_path / "d" / "002.webp").write_bytes((tmp_path / "d" / "002.webp").read_bytes()[:-5])
    src = FileSource(tmp_path / "d", format="webp", image_mode="RGB")
    with Loader(src, batch_size=4, seed=0) as loader, pytest.raises(FormatError) as info:
        next(iter(loader))
    assert "002.webp: truncated WebP" in str(info.value)


def test_options_for_webp_files(tmp_path: Path) -> None:
    _folder(tmp_path / "d", 2)
    FileSource(tmp_path / "d", format="webp", exif_transpose=True).close()
    with pytest.raises(ConfigError, match="exif_transpose turns JPEGs and WebPs upright"):
        FileSource(tmp_path / "d", format="png", exif_transpose=True)


def test_tar_members_and_table_images(tmp_path: Path) -> None:
    blobs = [encode_webp(pixels(6, 4, 4 if i % 2 else 3)) for i in range(6)]
    write_tar(tmp_path / "s.tar", [(f"{i:04d}.webp", b) for i, b in enumerate(blobs)])
    src = FileSource([tmp_path / "s.tar"], format="tar")
    with Loader(src, batch_size=6, seed=0) as loader:
        b = next(iter(loader))
    for k, img in zip(b["index"].tolist(), b["webp"], strict=True):
        assert np.array_equal(img, pillow(blobs[k]))
    # A table's image column: WebP rows as stored (RGBA kept), beside a PNG and a JPEG.
    rows = [*blobs, pil_png(pixels(6, 4, 3))]
    path = tmp_path / "t.parquet"
    image = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    table = pa.table({"image": pa.array([{"bytes": r, "path": None} for r in rows], image)})
    pq.write_table(table, path)
    src = TableSource(str(path), columns=["image"], images=["image"], shuffle="none")
    got = src.read(0, np.arange(len(rows), dtype=np.int64))
    for k, img in enumerate(got["image"]):
        assert np.array_equal(img, pillow(rows[k])), k
    src.close()


def pil_png(a: np.ndarray[Any, Any]) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(a).save(buf, "PNG")
    return buf.getvalue()
