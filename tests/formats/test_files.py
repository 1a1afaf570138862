"""File sample decoders: round trips, zero copy, and an error for every kind of damage."""

from __future__ import annotations

import io
import re
import tracemalloc
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from headrace.errors import ConfigError, FormatError
from headrace.formats import (
    FILE_FORMATS,
    decode,
    decode_hdf5,
    decode_jpeg,
    decode_npy,
    decode_npz,
    decode_png,
    decode_raw,
    encode,
    encode_npz,
    file_format,
    synthetic_arrays,
    write_sample_file,
)

FORMATS = ["raw", "npy", "npz", "jpeg", "png", "hdf5"]


def _sample(fmt: str, seed: int = 0) -> tuple[object, bytes]:
    shape = (24, 20, 3) if fmt in ("jpeg", "png") else (4, 5)
    arrays = synthetic_arrays(
        fmt,
        seed=seed,
        shape=shape,
        samples_per_file=1 if fmt in ("jpeg", "png") else 3,
        dtype="float32",
    )
    return arrays, encode(fmt, arrays)


def _opts(fmt: str) -> dict[str, object]:
    return {"dataset": "x"} if fmt == "hdf5" else {}


@pytest.mark.parametrize("fmt", FORMATS)
def test_round_trip_and_determinism(fmt: str) -> None:
    arrays, data = _sample(fmt)
    assert encode(fmt, arrays) == data  # same input, same bytes
    _, other = _sample(fmt, seed=1)
    assert other != data
    out = decode(fmt, data, name=f"s.{fmt}", **_opts(fmt))
    if fmt == "raw":
        assert out.tobytes() == np.asarray(arrays).tobytes()
    elif fmt == "npz":
        assert set(out) == {"x", "y"}
        np.testing.assert_array_equal(out["x"], arrays["x"])
        assert out["x"].shape == (3, 4, 5)  # leading sample axis
    elif fmt == "hdf5":
        np.testing.assert_array_equal(out, arrays["x"])
    elif fmt == "jpeg":
        assert out.shape == (24, 20, 3) and out.dtype == np.uint8
        assert np.abs(out.astype(int) - arrays.astype(int)).mean() < 12  # lossy
    else:
        np.testing.assert_array_equal(out, arrays)


@pytest.mark.parametrize("fmt", FORMATS)
def test_write_sample_file_path_and_buffer(fmt: str, tmp_path) -> None:
    arrays, data = _sample(fmt)
    path = tmp_path / f"a.{fmt}"
    assert write_sample_file(fmt, path, arrays) == len(data)
    assert path.read_bytes() == data
    buf = io.BytesIO()
    write_sample_file(fmt, buf, arrays)
    assert buf.getvalue() == data


def test_registry_names_aliases_extensions() -> None:
    assert file_format("jpg") is FILE_FORMATS["jpeg"]
    assert file_format("H5") is FILE_FORMATS["hdf5"]
    assert file_format("dir/x.npz") is FILE_FORMATS["npz"]
    assert file_format(".jpeg") is FILE_FORMATS["jpeg"]
    for name in ("x.jpe", "x.JFIF", "X.JPG"):
        assert file_format(name) is FILE_FORMATS["jpeg"]
    assert file_format(FILE_FORMATS["png"]) is FILE_FORMATS["png"]
    with pytest.raises(ConfigError, match=r"unknown file format 'tiff'"):
        file_format("tiff")


# ---- NPY ---------------------------------------------------------------------


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("dtype", ["<f4", ">i8", "u1", "bool", "<c8"])
def test_npy_zero_copy_dtype_shape_order(order: str, dtype: str) -> None:
    a = np.asarray(np.arange(24).reshape(2, 3, 4) % 7, dtype=dtype, order=order)
    buf = io.BytesIO()
    np.save(buf, a)
    data = bytearray(buf.getvalue())
    out = decode_npy(data, name="a.npy")
    np.testing.assert_array_equal(out, a)
    assert out.dtype == a.dtype and out.flags.f_contiguous == a.flags.f_contiguous
    assert np.shares_memory(out, np.frombuffer(data, np.uint8))  # no copy


def test_npy_accepts_uint8_array_and_memoryview() -> None:
    a = np.arange(10, dtype=np.int16)
    raw = np.frombuffer(encode("npy", a), np.uint8).copy()
    np.testing.assert_array_equal(decode_npy(raw, name="a"), a)
    np.testing.assert_array_equal(decode_npy(memoryview(raw), name="a"), a)
    with pytest.raises(ConfigError, match=r"a: expected a bytes-like"):
        decode_npy("not bytes", name="a")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"contiguous"):
        decode_npy(raw[::2], name="a")


def test_npy_version_2_header() -> None:
    a = np.arange(6, dtype=np.float64)
    buf = io.BytesIO()
    np.lib.format.write_array(buf, a, version=(2, 0))
    np.testing.assert_array_equal(decode_npy(buf.getvalue(), name="v2"), a)


def test_npy_errors() -> None:
    data = encode("npy", np.arange(1000, dtype=np.int32))
    with pytest.raises(
        FormatError, match=r"x.npy: truncated: header says 4000 data bytes .* found 3000"
    ):
        decode_npy(data[:-1000], name="x.npy")
    with pytest.raises(
        FormatError, match=r"x.npy: corrupt: header says 4000 data bytes.*found 4001"
    ):
        decode_npy(data + b"\0", name="x.npy")
    with pytest.raises(FormatError, match=r"x.npy: not an NPY file"):
        decode_npy(b"PK\x03\x04" + data[4:], name="x.npy")
    with pytest.raises(FormatError, match=r"x.npy: truncated: 5 bytes"):
        decode_npy(data[:5], name="x.npy")
    with pytest.raises(FormatError, match=r"truncated: header says"):
        decode_npy(data[:40], name="x.npy")
    with pytest.raises(FormatError, match=r"unsupported NPY version 9"):
        decode_npy(data[:6] + b"\x09" + data[7:], name="x.npy")
    bad = data.replace(b"'descr'", b"'dxscr'")
    with pytest.raises(FormatError, match=r"corrupt NPY header: expected a dict"):
        decode_npy(bad, name="x.npy")
    bad = data.replace(b"'fortran_order': False", b"'fortran_order': 1    ")
    with pytest.raises(FormatError, match=r"bad fortran_order"):
        decode_npy(bad, name="x.npy")
    bad = data.replace(b"(1000,)", b"(-100,)")
    with pytest.raises(FormatError, match=r"bad shape"):
        decode_npy(bad, name="x.npy")
    bad = data.replace(b"'<i4'", b"'<zz'")
    with pytest.raises(FormatError, match=r"bad descr"):
        decode_npy(bad, name="x.npy")
    bad = data.replace(b"{'descr'", b"{{'descr'")
    with pytest.raises(FormatError, match=r"corrupt NPY header"):
        decode_npy(bad, name="x.npy")


_RECOPY = "copy the file again (a partial copy or download?) or leave it out"


def _forged(data: bytes, old: bytes, new: bytes) -> bytes:
    """``old`` replaced by the longer ``new`` in an NPY header, padding taken to fit."""
    pad = b" " * (len(new) - len(old)) + b"\n"
    assert pad in data
    return data.replace(old, new, 1).replace(pad, b"\n", 1)


@pytest.mark.parametrize(
    ("damage", "what"),
    [
        (lambda d: d[:8], r"truncated: 8 bytes, shorter than an NPY header"),
        (lambda d: d[:40], r"truncated: header says \d+ header bytes, found 30"),
        (lambda d: d.replace(b"{'descr'", b"{{'descr'"), r"corrupt NPY header \("),
        (lambda d: d.replace(b"'descr'", b"'dxscr'"), r"corrupt NPY header: expected a dict"),
        (lambda d: d.replace(b"(1000,)", b"(-100,)"), r"corrupt NPY header: bad shape"),
        (lambda d: d.replace(b"'<i4'", b"'<zz'"), r"corrupt NPY header: bad descr"),
        (lambda d: d.replace(b"False", b"1    "), r"corrupt NPY header: bad fortran_order"),
        (lambda d: _forged(d, b"(1000,)", b"(99999999999999999999,)"), r"pass 2\*\*63 - 1"),
        # No byte, yet NumPy cannot size it: its ValueError leaked ("array is too big").
        (lambda d: _forged(d, b"(1000,)", b"(0, 4611686018427387904)"), r"pass 2\*\*63 - 1"),
        (lambda d: _forged(d, b"(1000,)", b"(1099511627776, 1099511627776, 0)"), r"pass 2\*\*63"),
    ],
)
def test_a_damaged_npy_header_says_what_to_do(
    tmp_path: Path, damage: Callable[[bytes], bytes], what: str
) -> None:
    # The header's refusals named the file and the damage, but no fix (the data's did).
    path = tmp_path / "x.npy"
    np.save(path, np.arange(1000, dtype=np.int32))
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(FormatError) as info:
        decode_npy(path.read_bytes(), name=str(path))
    message = str(info.value)
    assert re.search(what, message), message
    assert message.startswith(f"{path}: ") and message.endswith(f": {_RECOPY}"), message


def test_npy_refuses_object_arrays() -> None:
    buf = io.BytesIO()
    np.save(buf, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(FormatError, match=r"Python objects"):
        decode_npy(buf.getvalue(), name="o.npy")


# ---- NPZ ---------------------------------------------------------------------


@pytest.mark.parametrize("compressed", [False, True])
def test_npz_reads_numpy_savez(compressed: bool) -> None:
    a, b = np.arange(12.0).reshape(3, 4), np.arange(5, dtype=np.uint16)
    buf = io.BytesIO()
    (np.savez_compressed if compressed else np.savez)(buf, a=a, b=b)
    data = buf.getvalue()
    out = decode_npz(data, name="x.npz")
    np.testing.assert_array_equal(out["a"], a)
    np.testing.assert_array_equal(out["b"], b)
    assert np.shares_memory(out["a"], np.frombuffer(data, np.uint8)) is (not compressed)
    only = decode_npz(data, name="x.npz", keys=["b"])
    assert list(only) == ["b"]


def test_npz_writer_is_numpy_compatible() -> None:
    arrays = {"a": np.arange(7), "b": np.ones((2, 2), np.float32)}
    for compress in (False, True):
        with np.load(io.BytesIO(encode_npz(arrays, compress=compress))) as z:
            np.testing.assert_array_equal(z["a"], arrays["a"])
            np.testing.assert_array_equal(z["b"], arrays["b"])


def _npz_with_member(payload: bytes, method: int = zipfile.ZIP_STORED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=method) as zf:
        zf.writestr(
            zipfile.ZipInfo("a.npy", date_time=(1980, 1, 1, 0, 0, 0)), payload, compress_type=method
        )
    return buf.getvalue()


def test_npz_errors() -> None:
    data = encode_npz({"a": np.arange(1000, dtype=np.int32)})
    with pytest.raises(FormatError, match=r"x.npz: no member.*'zz'.*holds \['a'\]"):
        decode_npz(data, name="x.npz", keys=["zz"])
    # The fix is said, as for a truncated NPY or HDF5 file (it was not, for NPZ).
    cut = r"x.npz: truncated or corrupt NPZ: .*\); a partial copy .* copy it again"
    with pytest.raises(FormatError, match=cut):
        decode_npz(data[: len(data) // 2], name="x.npz")
    with pytest.raises(FormatError, match=r"x.npz: not an NPZ"):
        decode_npz(b"\x93NUMPY" + data[6:], name="x.npz")
    # A member whose npy header disagrees with the bytes stored for it.
    member = encode("npy", np.arange(1000, dtype=np.int32))
    short = _npz_with_member(member[:-1000])
    with pytest.raises(
        FormatError,
        match=r"x.npz: member 'a.npy': truncated: header says 4000 data bytes.*found 3000",
    ):
        decode_npz(short, name="x.npz")
    # Flip a byte of a stored member: the CRC catches it (or skip the check).
    pos = data.index(b"\x93NUMPY") + 500
    flipped = data[:pos] + bytes([data[pos] ^ 0xFF]) + data[pos + 1 :]
    with pytest.raises(FormatError, match=r"member 'a.npy': corrupt: CRC-32"):
        decode_npz(flipped, name="x.npz")
    assert decode_npz(flipped, name="x.npz", check_crc=False)["a"].shape == (1000,)


@pytest.mark.parametrize("rows", [None, np.array([0])])
def test_npz_forged_sizes_are_refused_before_allocating(
    tmp_path: Path, rows: np.ndarray | None
) -> None:
    # Each was allocated at the size claimed before the member was inflated: 4 GiB for
    # a directory's forged size (a zip64 one: a MemoryError), 1 TiB (a MemoryError) for
    # a row of a header's forged shape (10, 2**40) when rows were asked.
    path = tmp_path / "x.npz"
    path.write_bytes(
        _npz_with_member(encode("npy", np.zeros(1000, np.uint8)), zipfile.ZIP_DEFLATED)
    )
    data = bytearray(path.read_bytes())
    cd = data.rindex(b"PK\x01\x02")
    deflated = int.from_bytes(data[cd + 20 : cd + 24], "little")
    data[cd + 24 : cd + 28] = (0xFFFFFFF0).to_bytes(4, "little")  # uncompressed size
    path.write_bytes(bytes(data))
    said = (
        rf"x.npz: member 'a.npy': corrupt: directory says 4294967280 bytes uncompressed from "
        rf"{deflated} deflated, more than deflate makes of them \(at most 1032:1\)"
    )
    member = encode("npy", np.zeros((10, 1), np.uint8))
    forged = _npz_with_member(
        _forged(member, b"(10, 1)", b"(10, 1099511627776)"), zipfile.ZIP_DEFLATED
    )
    (tmp_path / "y.npz").write_bytes(forged)
    tracemalloc.start()
    try:
        with pytest.raises(FormatError, match=said):
            decode_npz(path.read_bytes(), name="x.npz", rows=rows)
        with pytest.raises(
            FormatError,
            match=r"y.npz: member 'a.npy': truncated: header says 10995116277760 data bytes "
            r"\(uint8, shape \(10, 1099511627776\)\), found 10",
        ):
            decode_npz((tmp_path / "y.npz").read_bytes(), name="y.npz", rows=rows)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, peak


def test_npz_member_truncated_inside_zip() -> None:
    data = bytearray(encode_npz({"a": np.arange(1000, dtype=np.int32)}))
    # Shrink the file's data region but keep the directory: directory sizes now overrun.
    cd = data.rindex(b"PK\x01\x02")
    damaged = bytes(data[:1200]) + bytes(data[cd:])
    # Fix up the end-of-directory offset so zipfile finds the directory at its new place.
    eocd = damaged.rindex(b"PK\x05\x06")
    new_cd = 1200
    damaged = damaged[: eocd + 16] + new_cd.to_bytes(4, "little") + damaged[eocd + 20 :]
    with pytest.raises(
        FormatError, match=r"x.npz: member 'a.npy' truncated: directory says \d+ bytes"
    ):
        decode_npz(damaged, name="x.npz")


def test_npz_deflate_errors() -> None:
    data = encode_npz({"a": np.arange(5000, dtype=np.int64)}, compress=True)
    start = data.index(b"a.npy") + 5 + 20  # inside the deflate stream
    garbage = data[:start] + b"\xff" * 40 + data[start + 40 :]
    with pytest.raises(FormatError, match=r"x.npz: member 'a.npy'"):
        decode_npz(garbage, name="x.npz")


def test_npz_unsupported_method_and_encrypted() -> None:
    data = bytearray(encode_npz({"a": np.arange(3)}))
    cd = data.rindex(b"PK\x01\x02")
    data[cd + 10 : cd + 12] = (12).to_bytes(2, "little")  # bzip2 in the directory
    with pytest.raises(FormatError, match=r"unsupported zip compression method 12"):
        decode_npz(bytes(data), name="x.npz")
    data = bytearray(encode_npz({"a": np.arange(3)}))
    cd = data.rindex(b"PK\x01\x02")
    data[cd + 8] |= 1
    with pytest.raises(FormatError, match=r"encrypted"):
        decode_npz(bytes(data), name="x.npz")


# ---- JPEG / PNG ----------------------------------------------------------------


@pytest.mark.parametrize("use_simplejpeg", [True, False])
def test_jpeg_decoders_and_truncation(use_simplejpeg: bool) -> None:
    img = synthetic_arrays("jpeg", seed=3, shape=(32, 40, 3))
    data = encode("jpeg", img, quality=95)
    out = decode_jpeg(data, name="a.jpg", use_simplejpeg=use_simplejpeg)
    assert out.shape == (32, 40, 3) and out.dtype == np.uint8
    assert (
        decode_jpeg(data + b"\0\0", name="a.jpg", use_simplejpeg=use_simplejpeg).shape == out.shape
    )
    for cut in (len(data) // 2, len(data) - 2, 3):
        with pytest.raises(FormatError, match=r"a.jpg: (truncated JPEG|not a JPEG)"):
            decode_jpeg(data[:cut], name="a.jpg", use_simplejpeg=use_simplejpeg)
    with pytest.raises(FormatError, match=r"a.jpg: not a JPEG"):
        decode_jpeg(b"\x89PNG" + data[4:], name="a.jpg", use_simplejpeg=use_simplejpeg)


def test_jpeg_grey_becomes_rgb() -> None:
    grey = synthetic_arrays("jpeg", seed=1, shape=(16, 16, 1))
    out = decode_jpeg(encode("jpeg", grey), name="g.jpg")
    assert out.shape == (16, 16, 3)


def test_jpeg_truncated_with_eoi_appended_is_caught_by_simplejpeg() -> None:
    data = encode("jpeg", synthetic_arrays("jpeg", seed=3, shape=(64, 64, 3)))
    forged = data[: len(data) // 2] + b"\xff\xd9"
    with pytest.raises(FormatError, match=r"a.jpg: corrupt JPEG"):
        decode_jpeg(forged, name="a.jpg", use_simplejpeg=True)


@pytest.mark.parametrize(
    ("shape", "dtype", "channels"),
    [
        ((8, 9), np.uint8, 1),
        ((8, 9, 2), np.uint8, 2),
        ((8, 9, 3), np.uint8, 3),
        ((8, 9, 4), np.uint8, 4),
        ((8, 9), np.uint16, 1),
    ],
)
def test_png_modes(shape: tuple[int, ...], dtype: type, channels: int) -> None:
    rng = np.random.default_rng(0)
    img = rng.integers(0, np.iinfo(dtype).max, size=shape, dtype=dtype)
    out = decode_png(encode("png", img), name="p.png")
    assert out.shape == (8, 9, channels) and out.dtype == dtype
    np.testing.assert_array_equal(out.reshape(shape), img)


def test_png_palette_expands() -> None:
    from PIL import Image

    img = Image.new("P", (4, 3))
    img.putpalette([0, 0, 0, 255, 0, 0] * 128)
    img.putpixel((1, 1), 1)
    buf = io.BytesIO()
    img.save(buf, "PNG")
    out = decode_png(buf.getvalue(), name="p.png")
    assert out.shape == (3, 4, 3) and tuple(out[1, 1]) == (255, 0, 0)


def test_png_errors() -> None:
    data = encode("png", synthetic_arrays("png", seed=0, shape=(32, 32, 3)))
    with pytest.raises(FormatError, match=r"p.png: truncated PNG"):
        decode_png(data[:-20], name="p.png")
    with pytest.raises(FormatError, match=r"p.png: not a PNG"):
        decode_png(b"\xff\xd8" + data[2:], name="p.png")
    # Named by what they are, with what to do (fails before: "not a PNG" only).
    jpeg = encode("jpeg", synthetic_arrays("jpeg", seed=0, shape=(8, 8, 3)))
    with pytest.raises(FormatError, match=r"p.png: not a PNG.*a JPEG image: .*format='jpeg'"):
        decode_png(jpeg, name="p.png")
    with pytest.raises(FormatError, match=r"p.png: not a PNG.*a TIFF image, .*re-encode"):
        decode_png(b"II*\x00" + bytes(60), name="p.png")
    # A file of 0 bytes (an interrupted copy) said so (fails before: "starts with b''").
    with pytest.raises(FormatError, match=r"p.png: an empty file \(0 bytes\), not a PNG"):
        decode_png(b"", name="p.png")
    with pytest.raises(FormatError, match=r"p.jpg: an empty file \(0 bytes\), not a JPEG"):
        decode_jpeg(b"", name="p.jpg")
    idat = data.index(b"IDAT") + 10
    corrupt = data[:idat] + b"\x11" * 30 + data[idat + 30 :]
    with pytest.raises(FormatError, match=r"p.png: corrupt or truncated PNG"):
        decode_png(corrupt, name="p.png")


def test_image_encoder_arguments() -> None:
    with pytest.raises(ConfigError, match=r"quality"):
        encode("jpeg", np.zeros((4, 4, 3), np.uint8), quality=0)
    with pytest.raises(ConfigError, match=r"uint8"):
        encode("jpeg", np.zeros((4, 4, 3), np.float32))
    with pytest.raises(ConfigError, match=r"1 or 3 channels"):
        encode("jpeg", np.zeros((4, 4, 2), np.uint8))
    with pytest.raises(ConfigError, match=r"PNG needs"):
        encode("png", np.zeros((4, 4, 5), np.uint8))
    with pytest.raises(ConfigError, match=r"one image per file"):
        synthetic_arrays("png", seed=0, shape=(4, 4, 3), samples_per_file=2)
    with pytest.raises(ConfigError, match=r"samples_per_file"):
        synthetic_arrays("npy", seed=0, shape=(4,), samples_per_file=0)
    with pytest.raises(ConfigError, match=r"npy holds one array"):
        encode("npy", {"a": np.zeros(1), "b": np.zeros(1)})


# ---- HDF5 -----------------------------------------------------------------------


def test_hdf5_index_forms() -> None:
    x = np.arange(60, dtype=np.float32).reshape(5, 3, 4)
    data = encode("hdf5", {"x": x, "grp/y": x[0]}, chunks=True)
    np.testing.assert_array_equal(decode_hdf5(data, name="f.h5", dataset="x", index=2), x[2])
    np.testing.assert_array_equal(decode_hdf5(data, name="f.h5", dataset="x", index=-1), x[4])
    np.testing.assert_array_equal(
        decode_hdf5(data, name="f.h5", dataset="x", index=[4, 0, 4]), x[[4, 0, 4]]
    )
    np.testing.assert_array_equal(
        decode_hdf5(data, name="f.h5", dataset="x", index=[1, 3]), x[[1, 3]]
    )
    assert decode_hdf5(data, name="f.h5", dataset="x", index=[]).shape == (0, 3, 4)
    np.testing.assert_array_equal(decode_hdf5(data, name="f.h5", dataset="grp/y"), x[0])
    np.testing.assert_array_equal(
        decode_hdf5(np.frombuffer(data, np.uint8), name="f.h5", dataset="x"), x
    )


def test_hdf5_errors() -> None:
    x = np.arange(5000, dtype=np.float64).reshape(50, 100)
    data = encode("hdf5", {"x": x, "s": np.float64(1.0)})
    with pytest.raises(
        FormatError,
        match=r"f.h5: no dataset 'z'; the file holds \['s', 'x'\]: every file .* leave this "
        r"file out",
    ):
        decode_hdf5(data, name="f.h5", dataset="z")
    with pytest.raises(ConfigError, match=r"index 50 out of range for 50 samples"):
        decode_hdf5(data, name="f.h5", dataset="x", index=50)
    with pytest.raises(ConfigError, match=r"index -51 out of range"):
        decode_hdf5(data, name="f.h5", dataset="x", index=[0, -51])
    with pytest.raises(ConfigError, match=r"scalar"):
        decode_hdf5(data, name="f.h5", dataset="s", index=0)
    with pytest.raises(FormatError, match=r"f.h5: truncated HDF5 file: \d+ bytes, its superblock"):
        decode_hdf5(data[: len(data) // 2], name="f.h5", dataset="x")
    with pytest.raises(FormatError, match=r"f.h5: not an HDF5 file"):
        decode_hdf5(b"PK\x03\x04" * 100, name="f.h5", dataset="x")


@pytest.mark.parametrize(
    ("chunks", "dims", "said"),
    [
        # Contiguous: HDF5 refuses the size, as a KeyError that leaked naming no file.
        (None, (2**40, 10), r"corrupt HDF5 metadata: Unable to synchronously open object"),
        # Chunked: HDF5 opens it, and NumPy's "array is too big" ValueError leaked.
        ((10, 10), (2**62, 2**62), r"has shape \(4611686018427387904, 4611686018427387904\) of "),
    ],
)
@pytest.mark.parametrize("index", [None, [0, 5]])
def test_a_forged_hdf5_dataspace_is_refused_by_name(
    tmp_path: Path,
    chunks: tuple[int, int] | None,
    dims: tuple[int, int],
    said: str,
    index: list[int] | None,
) -> None:
    import h5py

    path = tmp_path / "f.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=np.arange(1000).reshape(100, 10).astype(np.uint8), chunks=chunks)
    # The dataspace's dimensions and maximum dimensions, as little-endian u64 pairs.
    data = path.read_bytes()
    was = np.array([100, 10], "<u8").tobytes()
    assert data.count(was) >= 2
    path.write_bytes(data.replace(was, np.array(dims, "<u8").tobytes()))
    with pytest.raises(FormatError, match=rf"^{re.escape(str(path))}: .*{said}"):
        decode_hdf5(path.read_bytes(), name=str(path), dataset="x", index=index)


def test_hdf5_corrupt_chunk() -> None:
    x = np.arange(20000, dtype=np.float64).reshape(200, 100)
    data = bytearray(encode("hdf5", {"x": x}, compression="gzip"))
    mid = len(data) // 2
    data[mid : mid + 64] = b"\xa5" * 64
    with pytest.raises(FormatError, match=r"f.h5"):
        decode_hdf5(bytes(data), name="f.h5", dataset="x")


def test_raw_is_a_view() -> None:
    data = bytearray(b"abc")
    out = decode_raw(data, name="r")
    assert out.dtype == np.uint8 and np.shares_memory(out, np.frombuffer(data, np.uint8))


def test_npy_headers_are_never_evaluated_by_two_threads_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # CPython 3.11's AST builder keeps its recursion depth per interpreter: decode
    # threads evaluating NPY headers at once failed now and then with "SystemError:
    # AST constructor recursion depth mismatch" (met in a soak with 8 decode threads).
    import ast
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    from headrace.formats import _npy

    inside, most = [0], [0]
    count = threading.Lock()
    evaluate = ast.literal_eval

    def watched(text: str) -> object:
        with count:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        time.sleep(0.002)  # long enough for another thread to come in
        with count:
            inside[0] -= 1
        return evaluate(text)

    monkeypatch.setattr(_npy.ast, "literal_eval", watched)
    # 48 headers no other test writes (remembered headers are not evaluated again)
    files = [_npy.encode_npy(np.zeros((i + 1, 7, 5), np.uint16)) for i in range(48)]
    with ThreadPoolExecutor(8) as pool:
        shapes = list(pool.map(lambda b: decode_npy(b, name="a.npy").shape, files))
    assert shapes == [(i + 1, 7, 5) for i in range(48)]
    assert most[0] == 1


@pytest.mark.parametrize(
    ("fmt", "says"),
    [
        ("npz", r"it is an NPZ \(a zip archive, as np.savez writes\): name it .npz, format='npz'"),
        ("hdf5", r"it is an HDF5 file: name it .h5, format='hdf5' with datasets"),
        ("png", r"it is a PNG image: name it .png"),
        ("jpeg", r"it is a JPEG image: name it .jpg"),
        ("pickle", r"it is a Python pickle \(pickle.dump, torch.save\): headrace never unpickles"),
    ],
)
def test_a_file_of_another_format_named_npy_says_what_it_is(fmt: str, says: str) -> None:
    # It said only "not an NPY file: starts with b'PK\x03\x04-\x00'" (fails before).
    import pickle

    from headrace.formats._npy import npy_rows

    if fmt == "pickle":
        data = pickle.dumps(np.arange(6))
    elif fmt in ("npz", "hdf5"):
        data = encode(fmt, {"x": np.arange(6, dtype=np.uint8).reshape(1, 2, 3)})
    else:
        data = encode(fmt, np.zeros((8, 8, 3), np.uint8))
    with pytest.raises(FormatError, match=r"x\.npy: not an NPY file: .*; " + says):
        decode_npy(data, name="x.npy")
    with pytest.raises(FormatError, match=r"y\.npy: not an NPY file: .*; " + says):
        npy_rows(lambda at, n: memoryview(data)[at : at + n], name="y.npy")


def test_an_interrupt_while_a_member_opens_stays_an_interrupt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A signal landing between ZipFile marking a member open and its handle being made
    # left the handle open, and the `with` block's close() raised a ValueError ("can't
    # close the ZIP file while there is an open writing handle") over the interrupt:
    # `headrace gen` stopped by SIGTERM exited 1, not 143.
    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(zipfile, "_ZipWriteFile", interrupted)
    with pytest.raises(KeyboardInterrupt):
        encode_npz({"a": np.arange(3)})
