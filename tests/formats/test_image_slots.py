"""Images decoded straight into the batch's array (FileSource files, table image
columns): every kind of JPEG and PNG gives Pillow's pixels, byte for byte what
decoding each image and ``np.stack`` gave, in place where the headers predict the
shape, copied once where they cannot, ragged where the sizes differ; a header that
lies never gives a wrong batch."""

from __future__ import annotations

import io
import struct
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import simplejpeg
from PIL import Image, ImageOps

from _png_files import png_bytes
from headrace.errors import FormatError
from headrace.formats import FileSource, TableSource, decode_jpeg, decode_png, encode_png
from headrace.formats import _image_slots as image_slots
from headrace.formats import _images as images
from headrace.formats._file_samples import stack_samples
from headrace.formats._image_slots import ImageSlots
from headrace.formats._images import jpeg_layout, png_layout

_RNG = np.random.default_rng(5)
_H, _W = 20, 28  # not square: a turn by 90 degrees changes the shape


def _pixels(channels: int, h: int = _H, w: int = _W) -> np.ndarray[Any, Any]:
    return _RNG.integers(0, 256, (h, w, channels), dtype=np.uint8)


def _save(img: Image.Image, fmt: str, **options: Any) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt, **options)
    return buf.getvalue()


#: 16-bit PNGs written here and their arrays: Pillow reads the colour types' high
#: bytes only, so the reference for them (``mode=None``) is the array written.
_WRITTEN16: dict[bytes, np.ndarray[Any, Any]] = {}


def _png16(colour: int, channels: int) -> Callable[[], bytes]:
    def make() -> bytes:
        a = _RNG.integers(0, 65536, (_H, _W, channels), dtype=np.uint16)
        data = png_bytes(a[:, :, 0] if channels == 1 else a, colour, filtered=True)
        _WRITTEN16[data] = a
        return data

    return make


def _exif_jpeg(orientation: int, h: int = _H, w: int = _W) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return _save(Image.fromarray(_pixels(3, h, w)), "JPEG", exif=exif.tobytes())


#: kind -> (file extension, a new file's bytes)
KINDS: dict[str, tuple[str, Callable[[], bytes]]] = {
    "grey jpeg": ("jpg", lambda: _save(Image.fromarray(_pixels(1)[:, :, 0]), "JPEG")),
    "rgb jpeg": ("jpg", lambda: _save(Image.fromarray(_pixels(3)), "JPEG", quality=80)),
    "cmyk jpeg": ("jpg", lambda: _save(Image.fromarray(_pixels(4), "CMYK"), "JPEG")),
    "png named jpg": ("jpg", lambda: _save(Image.fromarray(_pixels(3)), "PNG")),
    "grey png": ("png", lambda: _save(Image.fromarray(_pixels(1)[:, :, 0]), "PNG")),
    "grey16 png": ("png", _png16(0, 1)),
    "la16 png": ("png", _png16(4, 2)),
    "rgb16 png": ("png", _png16(2, 3)),
    "rgba16 png": ("png", _png16(6, 4)),
    "la png": ("png", lambda: _save(Image.fromarray(_pixels(2), "LA"), "PNG")),
    "rgb png": ("png", lambda: _save(Image.fromarray(_pixels(3)), "PNG")),
    "rgba png": ("png", lambda: _save(Image.fromarray(_pixels(4)), "PNG")),
    "palette png": ("png", lambda: _save(Image.fromarray(_pixels(3)).quantize(8), "PNG")),
    "palette trns png": (
        "png",
        lambda: _save(Image.fromarray(_pixels(3)).quantize(8), "PNG", transparency=0),
    ),
}


def pillow(data: bytes, mode: str | None, *, kind: str, turn: bool = False) -> np.ndarray[Any, Any]:
    """What Pillow gives, under the module's rules for ``mode=None`` (16-bit PNGs: the
    array written, every bit)."""
    if mode is None and data in _WRITTEN16:
        return _WRITTEN16[data]
    img = Image.open(io.BytesIO(data))
    if turn:
        img = ImageOps.exif_transpose(img)
    if mode is None and kind == "jpeg":
        mode = "RGB"
    if mode is not None:
        if img.mode != mode:
            if mode in ("L", "RGB"):  # tRNS changes no pixel of these (and Pillow warns)
                img.info.pop("transparency", None)
            img = img.convert(mode)
    elif img.mode == "P":
        img = img.convert("RGBA" if "transparency" in img.info else "RGB")
    a = np.asarray(img)
    if a.dtype == np.int32 or a.dtype.byteorder == ">":
        a = a.astype(np.uint16)
    return a[:, :, None] if a.ndim == 2 else a


def _files(root: Path, blobs: list[bytes], ext: str) -> None:
    root.mkdir()
    for i, b in enumerate(blobs):
        (root / f"{i:02d}.{ext}").write_bytes(b)


def _spy_buffers(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether each simplejpeg decode was given a buffer."""
    seen: list[bool] = []
    real = simplejpeg.decode_jpeg

    def spy(*args: Any, **kw: Any) -> Any:
        seen.append(kw.get("buffer") is not None)
        return real(*args, **kw)

    monkeypatch.setattr(images._simplejpeg, "decode_jpeg", spy)
    return seen


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("mode", [None, "L", "RGBA"])
def test_every_kind_of_image_is_pillows_in_place_or_copied_once(
    tmp_path: Path, kind: str, mode: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    ext, make = KINDS[kind]
    blobs = [make() for _ in range(5)]
    _files(tmp_path / "r", blobs, ext)
    fmt = "jpeg" if ext == "jpg" else "png"
    seen = _spy_buffers(monkeypatch)
    src = FileSource(tmp_path / "r", format=fmt, shuffle="none", image_mode=mode, decode_threads=2)
    got = src.read(0, np.arange(5))
    want = np.stack([pillow(b, mode, kind=fmt) for b in blobs])
    assert got["image"].dtype == want.dtype and "image_shape" not in got
    np.testing.assert_array_equal(got["image"], want)
    # simplejpeg decodes straight into the batch wherever it decodes the final pixels.
    direct = kind in ("rgb jpeg", "grey jpeg") and (
        mode in (None, "RGBA") or (kind, mode) == ("grey jpeg", "L")
    )
    assert seen == ([True] * 5 if direct else [False] * len(seen)), (kind, mode, seen)
    # The same bytes as a table's image column.
    table = tmp_path / "t.parquet"
    pq.write_table(pa.table({"img": pa.array(blobs, pa.binary())}), table)
    tsrc = TableSource(table, images=["img"], image_mode=mode, shuffle=False, decode_threads=2)
    np.testing.assert_array_equal(tsrc.read(0, np.arange(5))["img"], want)
    src.close()
    tsrc.close()


def test_headers_predict_what_each_kind_decodes_to() -> None:
    for kind, (ext, make) in KINDS.items():
        data = make()
        for mode in (None, "L", "LA", "RGB", "RGBA"):
            got = (jpeg_layout if ext == "jpg" else png_layout)(data, mode=mode)  # type: ignore[operator]
            arr = (decode_jpeg if ext == "jpg" else decode_png)(data, name="x", mode=mode)  # type: ignore[operator]
            if got is None:  # not predicted: a palette without a mode
                assert kind.startswith("palette") and mode is None, kind
                continue
            assert got == (arr.shape, arr.dtype), (kind, mode)
    for orientation in range(1, 9):
        data = _exif_jpeg(orientation)
        arr = decode_jpeg(data, name="x", exif_transpose=True)
        assert jpeg_layout(data, exif_transpose=True) == (arr.shape, arr.dtype)
    assert jpeg_layout(b"GIF89a....") is None
    assert jpeg_layout(b"\xff\xd8\xff\xd9") is None  # no frame header
    assert png_layout(b"\x89PNG\r\n\x1a\n" + b"\0" * 30) is None  # no IHDR


def test_exif_turned_images_fill_the_batch_upright(tmp_path: Path) -> None:
    # Stored 20 x 28 tagged 6 or 8 and stored 28 x 20 untagged: all 28 x 20 upright.
    blobs = [_exif_jpeg(6), _exif_jpeg(1, _W, _H), _exif_jpeg(8), _exif_jpeg(3, _W, _H)]
    _files(tmp_path / "r", blobs, "jpg")
    src = FileSource(tmp_path / "r", format="jpeg", shuffle="none", exif_transpose=True)
    got = src.read(0, np.arange(4))["image"]
    want = np.stack([pillow(b, "RGB", kind="jpeg", turn=True) for b in blobs])
    assert got.shape == (4, _W, _H, 3)
    np.testing.assert_array_equal(got, want)
    stored = FileSource(tmp_path / "r", format="jpeg", shuffle="none").read(0, np.arange(4))
    assert stored["image"].dtype == object  # as stored the sizes differ
    for i, b in enumerate(blobs):
        np.testing.assert_array_equal(stored["image"][i], pillow(b, "RGB", kind="jpeg"))
    src.close()


@pytest.mark.parametrize("threads", [0, 2])
def test_mixed_sizes_stay_ragged_each_image_its_own(tmp_path: Path, threads: int) -> None:
    # The first file decides the batch's array; a later size sends the batch ragged.
    sizes = [(_H, _W), (_H, _W), (_W, _H), (_H, _W), (9, 9)]
    blobs = [_save(Image.fromarray(_pixels(3, h, w)), "JPEG") for h, w in sizes]
    _files(tmp_path / "r", blobs, "jpg")
    src = FileSource(tmp_path / "r", format="jpeg", shuffle="none", decode_threads=threads)
    got = src.read(0, np.arange(5))
    assert got["image"].dtype == object
    assert got["image_shape"].tolist() == [[h, w, 3] for h, w in sizes]
    parts = list(got["image"])
    for i, b in enumerate(blobs):
        np.testing.assert_array_equal(parts[i], pillow(b, None, kind="jpeg"))
        # Copied out of the dropped batch array: no image keeps it, or another, alive.
        assert parts[i].base is None or parts[i].base.nbytes == parts[i].nbytes
    assert not any(np.shares_memory(a, b) for i, a in enumerate(parts) for b in parts[i + 1 :])
    src.close()


def test_a_file_read_twice_in_a_batch_fills_both_slots(tmp_path: Path) -> None:
    blobs = [KINDS["rgb jpeg"][1]() for _ in range(3)]
    _files(tmp_path / "r", blobs, "jpg")
    src = FileSource(tmp_path / "r", format="jpeg", shuffle="none", decode_threads=2)
    got = src.read(0, np.arange(7))  # over the epoch's end: files 0 1 2 0 1 2 0
    assert got["image"].shape == (7, _H, _W, 3)
    for k in range(7):
        np.testing.assert_array_equal(got["image"][k], pillow(blobs[k % 3], None, kind="jpeg"))
    src.close()


@pytest.mark.parametrize("threads", [0, 2])
def test_a_corrupt_image_in_a_batch_is_named_or_replaced(tmp_path: Path, threads: int) -> None:
    blobs = [KINDS["rgb jpeg"][1]() for _ in range(6)]
    # Its header is whole (the batch's array is allocated for it), its scan cut short.
    blobs[3] = blobs[3][: len(blobs[3]) // 2] + b"\xff\xd9"
    _files(tmp_path / "r", blobs, "jpg")
    src = FileSource(tmp_path / "r", format="jpeg", shuffle="none", decode_threads=threads)
    with pytest.raises(FormatError, match=r"03\.jpg: corrupt JPEG"):
        src.read(0, np.arange(6))
    src.close()
    rep = FileSource(
        tmp_path / "r", format="jpeg", shuffle="none", decode_threads=threads, on_corrupt="replace"
    )
    got = rep.read(0, np.arange(6))
    assert 3 not in got["index"].tolist() and got["image"].shape == (6, _H, _W, 3)
    for k, i in enumerate(got["index"].tolist()):
        np.testing.assert_array_equal(got["image"][k], pillow(blobs[i], None, kind="jpeg"))
    rep.close()
    # A table's column: the error names the row.
    table = tmp_path / "t.parquet"
    pq.write_table(pa.table({"img": pa.array(blobs, pa.binary())}), table)
    tsrc = TableSource(table, images=["img"], shuffle=False, decode_threads=threads)
    with pytest.raises(FormatError, match=r"t\.parquet: column 'img', row 3 .*corrupt JPEG"):
        tsrc.read(0, np.arange(6))
    tsrc.close()


def test_an_ihdr_claiming_a_huge_image_fails_only_its_own_file(tmp_path: Path) -> None:
    # 13,000 x 13,000 RGB (under twice the bomb limit) in a ~100-byte PNG: the batch's
    # array was allocated for 512 of it (260 GB) before any decode, a MemoryError that
    # failed the batch naming no file, and on_corrupt="replace" could not replace it.
    ihdr = struct.pack(">IIBBBBB", 13000, 13000, 8, 2, 0, 0, 0)
    forged = b"\x89PNG\r\n\x1a\n" + b"".join(
        struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        for kind, body in ((b"IHDR", ihdr), (b"IDAT", zlib.compress(bytes(100))), (b"IEND", b""))
    )
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "000.png").write_bytes(forged)
    for i in range(1, 512):
        (tmp_path / "r" / f"{i:03d}.png").write_bytes(
            encode_png(np.full((8, 8, 3), i % 256, np.uint8))
        )
    src = FileSource(tmp_path / "r", format="png", shuffle="none")
    with pytest.raises(FormatError, match=r"000\.png: corrupt or truncated PNG"):
        src.read(0, np.arange(512))
    src.close()
    rep = FileSource(tmp_path / "r", format="png", shuffle="none", on_corrupt="replace")
    got = rep.read(0, np.arange(512))
    assert 0 not in got["index"].tolist() and got["image"].shape == (512, 8, 8, 3)
    assert (got["image"][:, 0, 0, 0] == got["index"] % 256).all()
    rep.close()


@pytest.mark.parametrize("lie", ["larger", "smaller", "other dtype"])
def test_a_header_that_lies_gives_the_decoded_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lie: str
) -> None:
    # Fault injection: the first file's predicted layout is wrong; the batch is what
    # the decodes give (stacked: every image is 20 x 28), never the prediction's.
    blobs = [KINDS["rgb jpeg"][1]() for _ in range(4)]
    _files(tmp_path / "r", blobs, "jpg")
    real = image_slots.image_layout
    wrong = {
        "larger": ((_H + 4, _W, 3), np.dtype(np.uint8)),
        "smaller": ((_H - 4, _W, 3), np.dtype(np.uint8)),
        "other dtype": ((_H, _W, 3), np.dtype(np.uint16)),
    }[lie]

    def lying(data: Any, **kw: Any) -> Any:
        return wrong if kw["name"].endswith("00.jpg") else real(data, **kw)

    monkeypatch.setattr("headrace.formats._file_decode.image_layout", lying)
    src = FileSource(tmp_path / "r", format="jpeg", shuffle="none", decode_threads=0)
    got = src.read(0, np.arange(4))
    want = np.stack([pillow(b, None, kind="jpeg") for b in blobs])
    assert got["image"].dtype == np.uint8
    np.testing.assert_array_equal(got["image"], want)
    src.close()


def test_decoders_fill_out_only_when_the_image_fits_it() -> None:
    data = KINDS["rgb jpeg"][1]()
    want = pillow(data, None, kind="jpeg")
    for use_sj in (True, False):
        out = np.full((_H, _W, 3), 7, np.uint8)
        assert decode_jpeg(data, name="x", out=out, use_simplejpeg=use_sj) is out
        np.testing.assert_array_equal(out, want)
        for shape in ((_H + 1, _W, 3), (_H - 1, _W, 3), (_H, _W, 4)):
            big = np.full(shape, 7, np.uint8)
            got = decode_jpeg(data, name="x", out=big, use_simplejpeg=use_sj)
            assert got is not big and not np.shares_memory(got, big)
            np.testing.assert_array_equal(got, want)
    turned = _exif_jpeg(6)
    out = np.empty((_W, _H, 3), np.uint8)
    assert decode_jpeg(turned, name="x", exif_transpose=True, out=out) is out
    np.testing.assert_array_equal(out, pillow(turned, "RGB", kind="jpeg", turn=True))
    png = KINDS["grey16 png"][1]()
    out16 = np.empty((_H, _W, 1), np.uint16)
    assert decode_png(png, name="x", out=out16) is out16
    np.testing.assert_array_equal(out16, pillow(png, None, kind="png"))
    with pytest.raises(Exception, match=r"out must be a C-contiguous, writable array"):
        decode_jpeg(data, name="x", out=np.empty((_H, _W * 2, 3), np.uint8)[:, ::2])


def test_slots_assemble_only_what_fits() -> None:
    layout = ((2, 3, 1), np.dtype(np.uint8))
    slots = ImageSlots(3)
    assert slots.slot(0, None) is None and slots.out is None  # nothing predicted yet
    s0 = slots.slot(0, layout)
    assert s0 is not None and slots.slot(1, ((3, 2, 1), np.dtype(np.uint8))) is None
    s0[...] = 1
    parts = [s0, np.full((2, 3, 1), 2, np.uint8), s0]  # part 2: file 0 taken again
    batch = stack_samples([{"image": p} for p in parts], np.arange(3), {"image": slots})
    assert batch["image"] is slots.out
    assert batch["image"][:, 0, 0, 0].tolist() == [1, 2, 1]
    ragged = ImageSlots(2)
    r0 = ragged.slot(0, layout)
    assert r0 is not None
    r0[...] = 5
    odd = np.zeros((1, 1, 1), np.uint8)
    batch = stack_samples([{"image": r0}, {"image": odd}], np.arange(2), {"image": ragged})
    assert batch["image"].dtype == object
    assert batch["image_shape"].tolist() == [[2, 3, 1], [1, 1, 1]]
    assert not np.shares_memory(batch["image"][0], ragged.out)
    assert batch["image"][0].sum() == 30


def test_without_simplejpeg_nothing_is_predicted_and_the_batch_is_pillows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blobs = [KINDS["rgb jpeg"][1]() for _ in range(3)]
    _files(tmp_path / "r", blobs, "jpg")
    monkeypatch.setattr(images, "_simplejpeg", None)
    assert jpeg_layout(blobs[0]) is None
    src = FileSource(tmp_path / "r", format="jpeg", shuffle="none", decode_threads=2)
    got = src.read(0, np.arange(3))["image"]
    np.testing.assert_array_equal(got, np.stack([pillow(b, None, kind="jpeg") for b in blobs]))
    src.close()
