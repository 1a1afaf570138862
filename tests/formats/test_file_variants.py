"""Files as other tools write them: each variant reads as the reference reader does
(np.load, Pillow, h5py), or is refused by name, saying what is unsupported."""

from __future__ import annotations

import io
import struct
import zipfile
import zlib
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from PIL import Image

from _png_files import png_bytes
from headrace.errors import FormatError
from headrace.formats import (
    decode_hdf5,
    decode_jpeg,
    decode_npy,
    decode_npz,
    decode_png,
    encode,
)
from headrace.formats._npz import npz_rows

# ---------------------------------------------------------------- NPY


def _npy(a: np.ndarray[Any, Any], version: tuple[int, int] | None = None) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, a, version=version)
    return buf.getvalue()


def _same(got: np.ndarray[Any, Any], ref: np.ndarray[Any, Any]) -> None:
    assert got.dtype == ref.dtype
    assert got.shape == ref.shape
    if got.dtype.names:  # field by field: the padding between fields holds no data
        for field in got.dtype.names:
            _same(got[field], ref[field])
        return
    assert got.tobytes(order="A") == ref.tobytes(order="A")
    assert np.array_equal(got, ref)


_BASE = np.arange(24, dtype="<u4").reshape(2, 3, 4)
NPY_VARIANTS = {
    ">u4": _BASE.astype(">u4"),
    ">f8": _BASE.astype(">f8"),
    "fortran": np.asfortranarray(np.arange(12.0).reshape(3, 4)),
    "0-d": np.array(3.5),
    "1-d": np.arange(5),
    "4-d": np.arange(120, dtype=np.int16).reshape(2, 3, 4, 5),
    "empty": np.zeros((0, 3)),
    "bool": np.array([True, False, True]),
    "float16": np.arange(4, dtype=np.float16),
    "complex": np.array([1 + 2j, -3j]),
    "datetime": np.array(["2020-01-01", "2024-02-29"], dtype="M8[D]"),
    "unicode": np.array(["ab", "cdé"]),
    "structured": np.array([(1, 2.0, b"ab")], dtype=[("a", "<i4"), ("b", ">f8"), ("c", "S2")]),
    "nested struct": np.zeros(3, dtype=[("a", [("x", "<i2"), ("y", "u1", (2,))])]),
    "padded struct": np.array([(1, 2)], dtype=np.dtype([("a", "u1"), ("b", "<i4")], align=True)),
    "V0 (zero-size items)": np.zeros(3, dtype="V0"),
    "U0 (zero-size items)": np.ndarray((2, 2), dtype="<U0"),
}


@pytest.mark.parametrize("version", [None, (2, 0), (3, 0)])
@pytest.mark.parametrize("kind", list(NPY_VARIANTS))
def test_npy_variants_read_as_np_load(kind: str, version: tuple[int, int] | None) -> None:
    data = _npy(NPY_VARIANTS[kind], version)
    _same(decode_npy(data, name="x.npy"), np.load(io.BytesIO(data)))


def test_npy_python2_header_reads_as_np_load() -> None:
    # Python 2 NumPy wrote longs in the shape: (3L, 2L). np.load reads them (with a warning).
    head = b"{'descr': '<i4', 'fortran_order': False, 'shape': (3L, 2L), }\n"
    data = b"\x93NUMPY\x01\x00" + struct.pack("<H", len(head)) + head
    data += np.arange(6, dtype="<i4").tobytes()
    with pytest.warns(UserWarning, match="Python 2"):
        ref = np.load(io.BytesIO(data))
    _same(decode_npy(data, name="py2.npy"), ref)


@pytest.mark.parametrize("pad", [0, 7])
def test_npy_header_padded_oddly(pad: int) -> None:
    # Other writers do not pad the header to 64 bytes, nor end it with a newline.
    head = b"{'descr': '<i4', 'fortran_order': False, 'shape': (3,)}" + b" " * pad
    data = b"\x93NUMPY\x01\x00" + struct.pack("<H", len(head)) + head
    data += np.arange(3, dtype="<i4").tobytes()
    _same(decode_npy(data, name="odd.npy"), np.arange(3, dtype="<i4"))


@pytest.mark.parametrize(
    ("array", "match"),
    [
        (np.array([1, "a"], dtype=object), r"obj\.npy: NPY holds Python objects"),
        (np.array([(1, None)], dtype=[("a", "i4"), ("o", "O")]), "refusing to unpickle"),
    ],
)
def test_npy_object_arrays_are_refused_never_unpickled(array: Any, match: str) -> None:
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=True)
    with pytest.raises(FormatError, match=match):
        decode_npy(buf.getvalue(), name="obj.npy")


@pytest.mark.parametrize(
    ("cut", "match"),
    [
        (9, r"cut\.npy: truncated: 9 bytes, shorter than an NPY header"),
        (20, r"cut\.npy: truncated: header says \d+ header bytes, found 10"),
        (
            -3,
            r"cut\.npy: truncated: header says 96 data bytes \(>u4, shape \(2, 3, 4\)\), found 93",
        ),
    ],
)
def test_npy_truncated_in_header_or_data(cut: int, match: str) -> None:
    data = _npy(NPY_VARIANTS[">u4"])
    with pytest.raises(FormatError, match=match):
        decode_npy(data[:cut], name="cut.npy")


def test_npy_version_2_cut_inside_its_longer_header() -> None:
    data = _npy(np.arange(3), version=(2, 0))  # a 4-byte header length: 12 bytes before it
    with pytest.raises(FormatError, match=r"v2\.npy: truncated: 11 bytes, shorter than an NPY"):
        decode_npy(data[:11], name="v2.npy")


# ---------------------------------------------------------------- NPZ


def _savez(compress: bool, **arrays: Any) -> bytes:
    buf = io.BytesIO()
    (np.savez_compressed if compress else np.savez)(buf, **arrays)
    return buf.getvalue()


@pytest.mark.parametrize("compress", [False, True])
def test_npz_members_and_key_selection_read_as_np_load(compress: bool) -> None:
    data = _savez(compress, a=NPY_VARIANTS[">u4"], b=np.linspace(0, 1, 7), c=np.array(2))
    with np.load(io.BytesIO(data)) as ref:
        got = decode_npz(data, name="x.npz")
        assert sorted(got) == sorted(ref.files)
        for k in ref.files:
            _same(got[k], ref[k])
        only = decode_npz(data, name="x.npz", keys=["b"])
        assert list(only) == ["b"]
        _same(only["b"], ref["b"])


def test_npz_object_member_is_refused_unless_left_out() -> None:
    data = _savez(False, a=np.arange(3), o=np.array([1, "x"], dtype=object))
    with pytest.raises(FormatError, match=r"o\.npz: member 'o\.npy': NPY holds Python objects"):
        decode_npz(data, name="o.npz")
    _same(decode_npz(data, name="o.npz", keys=["a"])["a"], np.arange(3))


def test_npz_non_npy_member_is_named_as_not_an_array() -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("a.npy", _npy(np.arange(4)))
        zf.writestr("meta.json", b'{"x":1}')
    data = buf.getvalue()
    with pytest.raises(FormatError, match=r"m\.npz: member 'meta\.json' is not an array.*keys="):
        decode_npz(data, name="m.npz")
    _same(decode_npz(data, name="m.npz", keys=["a"])["a"], np.arange(4))


def test_npz_with_no_arrays_is_empty_as_np_load_says() -> None:
    # np.savez() with no arrays writes a bare 22-byte zip; zipfile probes for a zip64
    # record before its start, which must fail as on a real file (an OSError).
    data = _savez(False)
    with np.load(io.BytesIO(data)) as ref:
        assert ref.files == []
    assert decode_npz(data, name="e.npz") == {}


def test_npz_zip64_and_over_65535_members() -> None:
    one = _npy(np.array([7], np.uint8))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for i in range(65_540):  # past the classic directory's count: a zip64 end record
            zf.writestr(f"m{i}.npy", one)
        with zf.open("big.npy", "w", force_zip64=True) as f:  # zip64 sizes in the header
            f.write(_npy(np.arange(5)))
    got = decode_npz(buf.getvalue(), name="z.npz", keys=["m0", "m65539", "big"])
    _same(got["m65539"], np.array([7], np.uint8))
    _same(got["big"], np.arange(5))


def test_npz_streamed_writer_with_data_descriptors() -> None:
    class Unseekable(io.RawIOBase):
        def __init__(self) -> None:
            self.data = bytearray()

        def writable(self) -> bool:
            return True

        def write(self, b: Any) -> int:
            self.data += b
            return len(b)

    out = Unseekable()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        with zf.open("a.npy", "w") as f:
            np.lib.format.write_array(f, np.arange(10.0))
    _same(decode_npz(bytes(out.data), name="s.npz")["a"], np.arange(10.0))


def test_npz_flipped_byte_in_deflated_data_is_refused() -> None:
    data = bytearray(_savez(True, a=np.arange(1000)))
    info = zipfile.ZipFile(io.BytesIO(bytes(data))).infolist()[0]
    name_len, extra_len = struct.unpack_from("<HH", data, info.header_offset + 26)
    start = info.header_offset + 30 + name_len + extra_len
    data[start + info.compress_size // 2] ^= 0xFF
    with pytest.raises(FormatError, match=r"c\.npz: member 'a\.npy': .*(deflate|CRC)"):
        decode_npz(bytes(data), name="c.npz")


def _central_entry(data: bytes | bytearray) -> int:
    """Offset of the first member's central directory record."""
    return bytes(data).index(b"PK\x01\x02")


def test_npz_member_without_its_local_header_is_refused() -> None:
    data = bytearray(_savez(False, a=np.arange(10), b=np.arange(3)))
    off = zipfile.ZipFile(io.BytesIO(bytes(data))).getinfo("b.npy").header_offset
    data[off] ^= 0xFF  # the second member's local header signature, where the directory points
    with pytest.raises(
        FormatError, match=rf"h\.npz: member 'b\.npy': corrupt: no local file header at byte {off}"
    ):
        decode_npz(bytes(data), name="h.npz")


def test_npz_deflated_member_shorter_than_its_stream_is_refused() -> None:
    data = bytearray(_savez(True, a=np.arange(1000)))
    at = _central_entry(data) + 20  # compressed size: cut so the stream stops unfinished
    (size,) = struct.unpack_from("<I", data, at)
    struct.pack_into("<I", data, at, size // 2)
    with pytest.raises(
        FormatError,
        match=r"d\.npz: member 'a\.npy': truncated or corrupt deflate stream: inflated \d+ "
        r"bytes without reaching its end \(directory says 8128\)",
    ):
        decode_npz(bytes(data), name="d.npz")


def test_npz_stored_member_of_another_size_than_the_directory_says() -> None:
    data = bytearray(_savez(False, a=np.arange(10, dtype=np.uint8)))
    at = _central_entry(data) + 24  # uncompressed size
    (size,) = struct.unpack_from("<I", data, at)
    struct.pack_into("<I", data, at, size + 1)
    with pytest.raises(
        FormatError,
        match=rf"s\.npz: member 'a\.npy': corrupt: directory says {size + 1} bytes "
        rf"uncompressed, found {size}",
    ):
        decode_npz(bytes(data), name="s.npz")


@pytest.mark.parametrize("damage", ["local header", "encrypted", "method", "no arrays"])
def test_npz_counted_by_its_header_refuses_damage_by_name(damage: str) -> None:
    # samples_per_file="header" reads a member's NPY header alone (npz_rows): the same
    # damage as a decode meets is refused there too, naming the file and member.
    data = bytearray(_savez(False, a=np.arange(10), b=np.arange(3)))
    a = zipfile.ZipFile(io.BytesIO(bytes(data))).getinfo("a.npy")
    central = _central_entry(data)
    if damage == "local header":
        data[a.header_offset] ^= 0xFF
        says = rf"c\.npz: member 'a\.npy': corrupt: no local file header at byte {a.header_offset}"
    elif damage == "encrypted":
        data[central + 8] |= 0x1  # the directory's general purpose flags: bit 0
        says = r"c\.npz: member 'a\.npy' is encrypted"
    elif damage == "method":
        struct.pack_into("<H", data, central + 10, 12)  # bzip2
        says = r"c\.npz: member 'a\.npy': unsupported zip compression method 12"
    else:
        buf = io.BytesIO()
        zipfile.ZipFile(buf, "w").close()
        data = bytearray(buf.getvalue())
        says = r"c\.npz: an NPZ with no arrays: no samples to count"
    with pytest.raises(FormatError, match=says):
        npz_rows(io.BytesIO(bytes(data)), name="c.npz", key=None)  # type: ignore[arg-type]
    if damage != "no arrays":
        assert npz_rows(io.BytesIO(_savez(False, a=np.arange(10))), name="c.npz", key=None) == 10


@pytest.mark.parametrize("method", [zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA])
def test_npz_other_zip_compression_is_refused(method: int) -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=method) as zf:
        zf.writestr("a.npy", _npy(np.arange(4)))
    with pytest.raises(
        FormatError,
        match=rf"member 'a\.npy': unsupported zip compression "
        rf"method {method}",
    ):
        decode_npz(buf.getvalue(), name="b.npz")


# ---------------------------------------------------------------- PNG


def _pil_png(img: Image.Image, **options: Any) -> bytes:
    buf = io.BytesIO()
    img.save(buf, "PNG", **options)
    return buf.getvalue()


_RNG = np.random.default_rng(0)
_GREY = _RNG.integers(0, 256, (17, 23), dtype=np.uint8)
_RGB = _RNG.integers(0, 256, (17, 23, 3), dtype=np.uint8)
_RGBA = _RNG.integers(0, 256, (17, 23, 4), dtype=np.uint8)
_GREY16 = _RNG.integers(0, 65536, (17, 23), dtype=np.uint16)


def _pillow(data: bytes, mode: str | None = None) -> np.ndarray[Any, Any]:
    with Image.open(io.BytesIO(data)) as img:
        a = np.asarray(img if mode is None else img.convert(mode))
    return a[:, :, None] if a.ndim == 2 else a


@pytest.mark.parametrize(
    ("kind", "data", "mode"),
    [
        ("grey", _pil_png(Image.fromarray(_GREY)), None),
        ("grey + alpha", _pil_png(Image.fromarray(_RGBA[:, :, :2], "LA")), None),
        ("RGB", _pil_png(Image.fromarray(_RGB)), None),
        ("RGBA", _pil_png(Image.fromarray(_RGBA)), None),
        ("palette", _pil_png(Image.fromarray(_RGB).quantize(16)), "RGB"),
        ("palette + tRNS", _pil_png(Image.fromarray(_RGB).quantize(16), transparency=3), "RGBA"),
        ("16-bit grey", _pil_png(Image.fromarray(_GREY16)), None),
        ("1-bit", _pil_png(Image.fromarray(_GREY > 127)), "L"),
        ("2-bit grey", _pil_png(Image.fromarray(_GREY // 64 * 85), bits=2), None),
        ("RGB Adam7", png_bytes(_RGB, 2, interlace=True), None),
        ("RGB, filters 0-4", png_bytes(_RGB, 2, filtered=True), None),
        ("16-bit grey Adam7", png_bytes(_GREY16, 0, interlace=True), None),
    ],
)
def test_png_variants_read_as_pillow(kind: str, data: bytes, mode: str | None) -> None:
    _same(decode_png(data, name=f"{kind}.png"), _pillow(data, mode))


@pytest.mark.parametrize("interlace", [False, True], ids=["progressive", "Adam7"])
@pytest.mark.parametrize("filtered", [False, True], ids=["filter 0", "filters 0-4"])
@pytest.mark.parametrize(("colour", "channels"), [(0, 1), (4, 2), (2, 3), (6, 4)])
def test_png_16_bit_keeps_every_bit(
    colour: int, channels: int, filtered: bool, interlace: bool
) -> None:
    # Pillow reads 16-bit grey + alpha, RGB and RGBA as their high bytes (uint8): a
    # depth map, an HDR photo or a microscope's colour channels lost 8 bits silently
    # (fails before: uint8, the high bytes).
    a = _RNG.integers(0, 65536, (9, 11, channels), dtype=np.uint16)
    data = png_bytes(
        a[:, :, 0] if channels == 1 else a, colour, filtered=filtered, interlace=interlace
    )
    _same(decode_png(data, name="x16.png"), a)
    # Converted to a mode, as Pillow converts it (torchvision's loader): 8 bits.
    assert decode_png(data, name="x16.png", mode="RGB").dtype == np.uint8


@pytest.mark.parametrize("channels", [2, 3, 4])
def test_png_16_bit_colour_is_written_and_read_back(channels: int) -> None:
    # encode_png refused uint16 with channels (Pillow cannot write it).
    a = _RNG.integers(0, 65536, (6, 5, channels), dtype=np.uint16)
    data = encode("png", a)
    _same(decode_png(data, name="w16.png"), a)
    # Another decoder reads it: Pillow, the high bytes (RGBA for grey + alpha).
    high = _pillow(data)
    _same(high[:, :, [0, 3]] if channels == 2 else high, (a >> 8).astype(np.uint8))


def test_png_16_bit_colour_refused_where_pillow_opens_it_otherwise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A Pillow whose PNG plugin opens 16-bit RGB otherwise (a fault injected here): the
    # low bytes cannot be read, and the high bytes alone would be a silent loss.
    from PIL import PngImagePlugin

    modes = dict(PngImagePlugin._MODES)
    modes[(16, 2)] = ("RGBA", "RGB;16B")
    monkeypatch.setattr(PngImagePlugin, "_MODES", modes)
    data = png_bytes(_RNG.integers(0, 65536, (3, 4, 3), dtype=np.uint16), 2)
    with pytest.raises(
        FormatError,
        match=r"rgb16\.png: a 16-bit PNG \(colour type 2\).*"
        r"image_mode='RGB'",
    ):
        decode_png(data, name="rgb16.png")


def _resealed_png(a: np.ndarray[Any, Any], colour: int, cut: int) -> bytes:
    """``a``'s PNG with its zlib stream cut by ``cut`` bytes, every chunk well formed."""
    data = png_bytes(a, colour)
    at = data.index(b"IDAT") - 4
    (length,) = struct.unpack_from(">I", data, at)
    idat = data[at + 8 : at + 8 + length - cut]
    body = b"IDAT" + idat
    chunk = struct.pack(">I", len(idat)) + body + struct.pack(">I", zlib.crc32(body))
    return data[:at] + chunk + data[at + 12 + length :]


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16])
def test_a_cut_png_stream_is_refused_where_pillow_accepts_truncation(
    dtype: type, monkeypatch: pytest.MonkeyPatch
) -> None:
    # ImageFile.LOAD_TRUNCATED_IMAGES = True (in many training scripts) made Pillow fill a
    # PNG whose image data stops early with zeros: read as a good image, no on_corrupt
    # saw it (fails before: decoded, 150 pixels zeroed).
    from PIL import ImageFile

    a = _RNG.integers(0, 256 if dtype == np.uint8 else 65536, (40, 30, 3)).astype(dtype)
    cut = _resealed_png(a, 2, 400)
    with pytest.raises(FormatError, match=r"cut\.png: corrupt or truncated PNG"):
        decode_png(cut, name="cut.png")
    monkeypatch.setattr(ImageFile, "LOAD_TRUNCATED_IMAGES", True)
    with pytest.raises(FormatError, match=r"cut\.png: truncated PNG image data: its zlib"):
        decode_png(cut, name="cut.png")
    with pytest.raises(FormatError, match=r"cut\.png: truncated PNG image data"):
        decode_jpeg(cut, name="cut.png")  # a PNG named .jpg: the same check
    # A whole stream of too few scanlines (forged): refused too; good files still read.
    short = png_bytes(a[:39], 2)
    at = short.index(b"IHDR")
    forged = short[:at] + b"IHDR" + struct.pack(">II", 30, 40) + short[at + 12 :]
    forged = (
        forged[: at + 17] + struct.pack(">I", zlib.crc32(forged[at : at + 17])) + forged[at + 21 :]
    )
    with pytest.raises(
        FormatError, match=r"f\.png: corrupt PNG image data: \d+ bytes of scanlines, its IHDR says"
    ):
        decode_png(forged, name="f.png")
    for interlace in (False, True):
        good = png_bytes(a, 2, interlace=interlace, filtered=True)
        _same(decode_png(good, name="ok.png"), a)


def test_png_with_data_after_iend_is_named_as_such() -> None:
    data = _pil_png(Image.fromarray(_RGB))
    with pytest.raises(FormatError, match=r"t\.png: PNG with 4 bytes of other data after its IEND"):
        decode_png(data + b"junk", name="t.png")
    with pytest.raises(FormatError, match=r"t\.png: truncated PNG"):
        decode_png(data[: len(data) // 2], name="t.png")


# ---------------------------------------------------------------- JPEG

_SMOOTH = np.clip(
    np.add.outer(np.arange(64) * 3, np.arange(48) * 2)[:, :, None]
    + _RNG.integers(0, 20, (64, 48, 3)),
    0,
    255,
).astype(np.uint8)


def _jpeg(img: Image.Image, **options: Any) -> bytes:
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=90, **options)
    return buf.getvalue()


def _exif_rotated() -> bytes:
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: rotate 90 degrees clockwise to display
    return _jpeg(Image.fromarray(_SMOOTH), exif=exif.tobytes())


JPEG_VARIANTS = {
    "grey": _jpeg(Image.fromarray(_SMOOTH[:, :, 0])),
    "RGB 4:2:0": _jpeg(Image.fromarray(_SMOOTH), subsampling=2),
    "RGB 4:2:2": _jpeg(Image.fromarray(_SMOOTH), subsampling=1),
    "RGB 4:4:4": _jpeg(Image.fromarray(_SMOOTH), subsampling=0),
    "progressive": _jpeg(Image.fromarray(_SMOOTH), progressive=True),
    "CMYK": _jpeg(Image.fromarray(_SMOOTH).convert("CMYK")),
    "odd size": _jpeg(Image.fromarray(_SMOOTH[:17, :23])),
    "restart markers": _jpeg(Image.fromarray(_SMOOTH), restart_marker_blocks=1),
    "EXIF orientation 6 (not applied)": _exif_rotated(),
}


@pytest.mark.parametrize("simplejpeg", [True, False], ids=["simplejpeg", "pillow"])
@pytest.mark.parametrize("kind", list(JPEG_VARIANTS))
def test_jpeg_variants_read_as_pillow_on_both_paths(kind: str, simplejpeg: bool) -> None:
    data = JPEG_VARIANTS[kind]
    got = decode_jpeg(data, name="x.jpg", use_simplejpeg=simplejpeg)
    # Pixels as stored: no EXIF rotation (the 64 x 48 image stays 64 x 48).
    _same(got, _pillow(data, "RGB"))


@pytest.mark.parametrize("simplejpeg", [True, False], ids=["simplejpeg", "pillow"])
def test_jpeg_truncated_or_with_a_trailer(simplejpeg: bool) -> None:
    data = JPEG_VARIANTS["RGB 4:2:0"]
    with pytest.raises(FormatError, match=r"t\.jpg: truncated JPEG: no EOI"):
        decode_jpeg(data[: len(data) // 2], name="t.jpg", use_simplejpeg=simplejpeg)
    with pytest.raises(FormatError, match=r"t\.jpg: JPEG with 8 bytes of other data after"):
        decode_jpeg(data + b"ftypmp42", name="t.jpg", use_simplejpeg=simplejpeg)


def test_a_cmyk_jpeg_with_damaged_scan_data_is_refused_on_the_strict_path() -> None:
    # CMYK and YCCK JPEGs go to Pillow (for its pixels), whose libjpeg fills a scan cut
    # short with grey and says nothing: with simplejpeg installed every other JPEG is
    # refused for that (fails before: decoded, 64 x 48 of partly grey pixels).
    data = JPEG_VARIANTS["CMYK"]
    cut = data[: len(data) * 2 // 3] + b"\xff\xd9"
    with pytest.raises(FormatError, match=r"c\.jpg: corrupt JPEG \(.*premature end"):
        decode_jpeg(cut, name="c.jpg", use_simplejpeg=True)
    for mode in ("L", "RGBA"):  # converted: the same check
        with pytest.raises(FormatError, match=r"c\.jpg: corrupt JPEG"):
            decode_jpeg(cut, name="c.jpg", use_simplejpeg=True, mode=mode)
    # Pillow's path alone cannot tell (libjpeg only warns): documented, not refused.
    assert decode_jpeg(cut, name="c.jpg", use_simplejpeg=False).shape == (64, 48, 3)


@pytest.mark.parametrize("simplejpeg", [True, False], ids=["simplejpeg", "pillow"])
@pytest.mark.parametrize("mode", ["RGB", "RGBA", "L", "P"])
def test_a_png_named_jpeg_reads_as_pillow_reads_it(simplejpeg: bool, mode: str) -> None:
    # ImageNet's train set has one (n02105855_2933.JPEG), and crawls have many: Pillow
    # (so torchvision) reads them by their bytes; headrace stopped the epoch on it.
    img = Image.fromarray(_RGB).convert(mode)
    data = _pil_png(img)
    got = decode_jpeg(data, name="n02105855_2933.JPEG", use_simplejpeg=simplejpeg)
    _same(got, _pillow(data, "RGB"))
    with pytest.raises(FormatError, match=r"t\.JPEG: truncated PNG"):
        decode_jpeg(data[:-20], name="t.JPEG", use_simplejpeg=simplejpeg)
    with pytest.raises(FormatError, match=r"t\.JPEG: not a JPEG \(nor a PNG\): starts with"):
        decode_jpeg(b"GIF89a" + data, name="t.JPEG", use_simplejpeg=simplejpeg)


@pytest.mark.parametrize("path", ["png", "simplejpeg", "pillow"])
def test_large_images_are_read_as_pillow_reads_them_on_every_path(
    path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Pillow warns over MAX_IMAGE_PIXELS (89.5 MP) and refuses over twice that. The warning,
    # made an error to catch truncation, called a 90 MP scan "corrupt or truncated"
    # (replaced as corrupt under on_corrupt="replace"), while simplejpeg decoded the same
    # JPEG: the decoder installed decided the batch. Scaled down here: limit 1,000 pixels.
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)
    kind = "png" if path == "png" else "jpeg"
    decoder = decode_png if kind == "png" else decode_jpeg
    opts = {} if kind == "png" else {"use_simplejpeg": path == "simplejpeg"}

    def image(h: int, w: int) -> bytes:
        buf = io.BytesIO()
        Image.fromarray(np.full((h, w, 3), 90, np.uint8)).save(buf, kind.upper())
        return buf.getvalue()

    big = image(40, 45)  # 1,800 pixels: over the limit, under twice it
    with pytest.warns(Image.DecompressionBombWarning), Image.open(io.BytesIO(big)) as ref:
        want = np.asarray(ref.convert("RGB"))
    _same(decoder(big, name="big", **opts), want)
    with pytest.raises(
        FormatError,
        match=r"huge: (PNG|JPEG) of (50 x 41 = )?2,050 pixels, over twice Pillow's "
        r"decompression-bomb limit "
        r"\(PIL\.Image\.MAX_IMAGE_PIXELS = 1,000\)",
    ):
        decoder(image(41, 50), name="huge", **opts)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", None)  # no limit, as Pillow takes it
    assert decoder(image(41, 50), name="huge", **opts).shape[:2] == (41, 50)


@pytest.mark.parametrize(
    ("simplejpeg", "match"),
    [
        (True, r"g\.jpg: corrupt JPEG \(.*subsampling"),
        (
            False,
            r"g\.jpg: corrupt or truncated JPEG \(no image header found\): copy the file again",
        ),
    ],
    ids=["simplejpeg", "pillow"],
)
def test_jpeg_with_garbage_between_its_markers(simplejpeg: bool, match: str) -> None:
    with pytest.raises(FormatError, match=match):
        decode_jpeg(b"\xff\xd8" + bytes(20) + b"\xff\xd9", name="g.jpg", use_simplejpeg=simplejpeg)


@pytest.mark.parametrize("simplejpeg", [True, False], ids=["simplejpeg", "pillow"])
def test_jpeg_with_extraneous_bytes_before_its_end_reads_as_pillow_reads_it(
    simplejpeg: bool,
) -> None:
    # libjpeg warns "Corrupt JPEG data: N extraneous bytes before marker 0xd9" (some of
    # ImageNet's files) and skips them: every pixel is decoded. simplejpeg's strict mode
    # made the warning an error, so the installed decoder decided whether the image was in.
    data = JPEG_VARIANTS["RGB 4:2:0"]
    padded = data[:-2] + b"\x12\x34\x56" * 80 + data[-2:]
    _same(decode_jpeg(padded, name="x.jpg", use_simplejpeg=simplejpeg), _pillow(data, "RGB"))


# ---------------------------------------------------------------- HDF5


def _h5(path: Path, fill: Any, **options: Any) -> bytes:
    with h5py.File(path, "w", **options) as f:
        fill(f)
    return path.read_bytes()


_X = np.arange(60, dtype=">i4").reshape(5, 3, 4)

H5_VARIANTS = {
    "contiguous": lambda f: f.create_dataset("x", data=_X),
    "chunked": lambda f: f.create_dataset("x", data=_X, chunks=(1, 3, 4)),
    "gzip + shuffle": lambda f: f.create_dataset("x", data=_X, compression="gzip", shuffle=True),
    "lzf": lambda f: f.create_dataset("x", data=_X, compression="lzf"),
    "fletcher32": lambda f: f.create_dataset("x", data=_X, chunks=True, fletcher32=True),
    "scalar": lambda f: f.create_dataset("x", data=3.25),
    "fixed strings": lambda f: f.create_dataset("x", data=np.array([b"ab", b"cde"])),
    "compound": lambda f: f.create_dataset(
        "x", data=np.array([(1, 2.5), (3, 4.5)], dtype=[("a", "<i2"), ("b", ">f4")])
    ),
    "group path": lambda f: f.create_dataset("a/b/x", data=_X),
    "soft link": lambda f: (
        f.create_dataset("a/y", data=_X),
        f.__setitem__("x", h5py.SoftLink("/a/y")),
    ),
}


@pytest.mark.parametrize("kind", list(H5_VARIANTS))
def test_hdf5_variants_read_as_h5py(kind: str, tmp_path: Path) -> None:
    path = tmp_path / "v.h5"
    data = _h5(path, H5_VARIANTS[kind])
    name = "a/b/x" if kind == "group path" else "x"
    with h5py.File(path, "r") as f:
        ref = np.asarray(f[name][()])
        one = np.asarray(f[name][1]) if f[name].ndim else None
    _same(decode_hdf5(data, name="v.h5", dataset=name), ref)
    if one is not None:
        _same(decode_hdf5(data, name="v.h5", dataset=name, index=1), one)


def test_hdf5_variable_length_strings_come_as_h5py_gives_them(tmp_path: Path) -> None:
    data = _h5(
        tmp_path / "s.h5",
        lambda f: f.create_dataset("s", data=["ab", "cdé"], dtype=h5py.string_dtype()),
    )
    got = decode_hdf5(data, name="s.h5", dataset="s")
    assert got.dtype == object
    assert got.tolist() == [b"ab", "cdé".encode()]


@pytest.mark.parametrize("mode", ["headrace", "map-style"])
def test_hdf5_variable_length_samples_several_per_file(tmp_path: Path, mode: str) -> None:
    # With samples_per_file > 1 an item of a vlen string dataset is a bytes object, not
    # an array: the batch failed with "'bytes' object has no attribute 'shape'".
    from headrace.formats import FileSource

    texts = [["ab", "cdé"], ["f", "ghij"]]
    for i, t in enumerate(texts):
        _h5(
            tmp_path / f"{i}.h5",
            lambda f, t=t: f.create_dataset("s", data=t, dtype=h5py.string_dtype()),
        )
        vlen = h5py.vlen_dtype(np.int32)
        with h5py.File(tmp_path / f"{i}.h5", "a") as f:
            v = f.create_dataset("v", (2,), dtype=vlen)
            v[0], v[1] = np.arange(i + 1, dtype=np.int32), np.arange(3, dtype=np.int32)
    src = FileSource(
        tmp_path, format="hdf5", datasets=("s", "v"), samples_per_file=2, shuffle="none", mode=mode
    )
    batch = src.read(0, np.arange(4))
    assert batch["s"].dtype == object and batch["s"].shape == (4,)
    assert batch["s"].tolist() == [x.encode() for t in texts for x in t]
    assert [a.tolist() for a in batch["v"]] == [[0], [0, 1, 2], [0, 1], [0, 1, 2]]


def test_hdf5_missing_dataset_lists_those_present(tmp_path: Path) -> None:
    data = _h5(tmp_path / "m.h5", H5_VARIANTS["group path"])
    with pytest.raises(
        FormatError, match=r"m\.h5: no dataset 'a/b/zz'; the file holds \['a/b/x'\]"
    ):
        decode_hdf5(data, name="m.h5", dataset="a/b/zz")


def test_hdf5_external_link_is_refused_by_name(tmp_path: Path) -> None:
    _h5(tmp_path / "target.h5", H5_VARIANTS["contiguous"])
    data = _h5(
        tmp_path / "l.h5", lambda f: f.__setitem__("x", h5py.ExternalLink("target.h5", "/x"))
    )
    with pytest.raises(
        FormatError, match=r"l\.h5: 'x' .*external link to '/x' in file 'target\.h5'"
    ):
        decode_hdf5(data, name="l.h5", dataset="x")


def test_hdf5_dangling_soft_link_is_named(tmp_path: Path) -> None:
    data = _h5(tmp_path / "d.h5", lambda f: f.__setitem__("x", h5py.SoftLink("/gone")))
    with pytest.raises(FormatError, match=r"d\.h5: 'x' .*soft link to '/gone', which does not"):
        decode_hdf5(data, name="d.h5", dataset="x")


def test_hdf5_virtual_dataset_of_other_files_is_refused_not_filled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(2):
        _h5(tmp_path / f"src{i}.h5", lambda f, i=i: f.create_dataset("x", data=np.full(3, i + 1)))

    def virtual(f: Any) -> None:
        layout = h5py.VirtualLayout(shape=(2, 3), dtype="i8")
        for i in range(2):
            layout[i] = h5py.VirtualSource(f"src{i}.h5", "x", shape=(3,))
        f.create_virtual_dataset("v", layout, fillvalue=-1)

    data = _h5(tmp_path / "vds.h5", virtual)
    monkeypatch.chdir(tmp_path)  # even where the sources could be found by name
    with pytest.raises(
        FormatError,
        match=r"vds\.h5: dataset 'v' is a virtual dataset mapping "
        r"other files \['src0\.h5', 'src1\.h5'\]",
    ):
        decode_hdf5(data, name="vds.h5", dataset="v")


def test_hdf5_virtual_dataset_within_the_file_reads(tmp_path: Path) -> None:
    def virtual(f: Any) -> None:
        f.create_dataset("a", data=np.arange(6).reshape(2, 3))
        layout = h5py.VirtualLayout(shape=(3, 2), dtype="i8")
        for j in range(2):
            layout[:, j] = h5py.VirtualSource(".", "a", shape=(2, 3))[j, :]
        f.create_virtual_dataset("v", layout, fillvalue=-1)

    data = _h5(tmp_path / "self.h5", virtual)
    _same(decode_hdf5(data, name="self.h5", dataset="v"), np.arange(6).reshape(2, 3).T.copy())


def test_hdf5_external_raw_storage_is_refused_even_when_reachable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    np.arange(4, dtype="<i4").tofile(tmp_path / "raw.bin")
    data = _h5(
        tmp_path / "e.h5",
        lambda f: f.create_dataset("e", shape=(4,), dtype="<i4", external=[("raw.bin", 0, 16)]),
    )
    monkeypatch.chdir(tmp_path)  # HDF5 would read ./raw.bin: not the bytes headrace fetched
    with pytest.raises(
        FormatError,
        match=r"e\.h5: dataset 'e' keeps its data in external raw "
        r"file\(s\) \['raw\.bin'\]",
    ):
        decode_hdf5(data, name="e.h5", dataset="e")


def test_hdf5_null_dataspace_and_references_are_refused(tmp_path: Path) -> None:
    def fill(f: Any) -> None:
        f.create_dataset("n", data=h5py.Empty("f4"))
        f.create_dataset("r", shape=(2,), dtype=h5py.ref_dtype)

    data = _h5(tmp_path / "o.h5", fill)
    with pytest.raises(FormatError, match=r"o\.h5: dataset 'n' has a null dataspace"):
        decode_hdf5(data, name="o.h5", dataset="n")
    with pytest.raises(FormatError, match=r"o\.h5: dataset 'r' holds HDF5 object/region ref"):
        decode_hdf5(data, name="o.h5", dataset="r")


def test_hdf5_filter_not_loaded_is_named(tmp_path: Path) -> None:
    data = bytearray(
        _h5(
            tmp_path / "f.h5",
            lambda f: f.create_dataset("x", data=np.arange(10), chunks=(5,), compression="lzf"),
        )
    )
    # Rename the LZF filter (32000) in the pipeline message to one nobody registered,
    # as a Blosc- or bitshuffle-compressed file looks without hdf5plugin imported.
    at = data.find(b"lzf\x00")
    assert data[at - 8 : at - 6] == struct.pack("<H", 32000)
    data[at - 8 : at - 6] = struct.pack("<H", 32123)
    with pytest.raises(
        FormatError,
        match=r"f\.h5: dataset 'x' is compressed with HDF5 filter "
        r"32123 .*hdf5plugin",
    ):
        decode_hdf5(bytes(data), name="f.h5", dataset="x")


def test_hdf5_many_samples_per_file_pick_in_order(tmp_path: Path) -> None:
    data = _h5(tmp_path / "m.h5", H5_VARIANTS["chunked"])
    _same(decode_hdf5(data, name="m.h5", dataset="x", index=[3, 1, 3]), _X[[3, 1, 3]])
