"""File sample formats by name: decode bytes to arrays, encode arrays to bytes.

One file (or object) holds one or more samples. Decoders are pure functions
of the bytes; reading them is the I/O layer's job. ``decode("npz", data,
name=key)`` picks the decoder by format name or file extension.

Sample schemas (each decoder's module says more):

=========  ======================================================================
format     decoded value
=========  ======================================================================
raw        ``(nbytes,)`` ``uint8`` view of the bytes, no decoding
npy        one array, header dtype and shape; leading sample axis if several
npz        ``{member: array}``; leading sample axis per member if several
jpeg       ``(H, W, 3)`` ``uint8`` RGB (``mode=``: as Pillow's ``convert(mode)``)
png        ``(H, W, C)`` ``uint8`` (C = 1, 2, 3, 4; 16-bit files stay ``uint16``)
           (``mode=``: as Pillow's ``convert(mode)``)
image      JPEG, PNG, WebP, BMP, TIFF, PPM and PGM files (a class tree as
           torchvision's ``ImageFolder`` reads it), each by its bytes to RGB as
           ``jpeg`` decodes, or ``mode=``
hdf5       the named ``dataset``, or the samples ``index`` picks from its axis 0
tar        ``{field: object array}``: a WebDataset shard, one decoded array a sample
tfrecord   ``{feature: array}``, a 1-D ``object`` array of one array a record
=========  ======================================================================

``array_record`` (ArrayRecord, Grain's files) decodes as ``tfrecord``; it is read only.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import IO, Any, TypeAlias

import numpy as np
from numpy.typing import NDArray

from headrace.errors import ConfigError
from headrace.formats._array_record import decode_array_record, refuse_writing
from headrace.formats._buffer import Buffer, as_bytes_view
from headrace.formats._hdf5 import decode_hdf5, encode_hdf5
from headrace.formats._image_encode import encode_jpeg, encode_png, encode_webp
from headrace.formats._images import IMAGE_FORMATS, decode_image, decode_jpeg, decode_png
from headrace.formats._npy import decode_npy, encode_npy
from headrace.formats._npz import decode_npz, encode_npz
from headrace.formats._tar import decode_tar, encode_tar
from headrace.formats._tfrecord import decode_tfrecord, encode_tfrecord
from headrace.formats._webp import decode_webp

__all__ = [
    "FILE_FORMATS",
    "Decoded",
    "FileFormat",
    "decode",
    "decode_raw",
    "encode",
    "file_format",
    "EXTENSIONS",
    "format_of",
    "formats_by_extension",
    "synthetic_arrays",
    "write_sample_file",
]

#: What a decoder returns: one array, or named arrays (NPZ).
Decoded: TypeAlias = NDArray[Any] | dict[str, NDArray[Any]]
#: What an encoder takes: one array, or named arrays (NPZ, HDF5).
Arrays: TypeAlias = NDArray[Any] | Mapping[str, NDArray[Any]]


def decode_raw(data: Buffer, *, name: str) -> NDArray[np.uint8]:
    """The bytes themselves as a ``uint8`` view (no copy): for I/O benchmarks."""
    return np.frombuffer(as_bytes_view(data, name), dtype=np.uint8)


@dataclass(frozen=True, slots=True, kw_only=True)
class FileFormat:
    """A file format: its name, extensions, decoder and encoder."""

    name: str
    extensions: tuple[str, ...]
    decoder: Callable[..., Decoded]
    encoder: Callable[..., bytes]
    #: True when decoding returns views of the input bytes.
    zero_copy: bool


def _one(arrays: Arrays, fmt: str) -> NDArray[Any]:
    if isinstance(arrays, Mapping):
        if len(arrays) != 1:
            raise ConfigError(f"{fmt} holds one array; got {len(arrays)}: {sorted(arrays)}")
        return np.asarray(next(iter(arrays.values())))
    return np.asarray(arrays)


def _many(arrays: Arrays) -> Mapping[str, NDArray[Any]]:
    return arrays if isinstance(arrays, Mapping) else {"x": np.asarray(arrays)}


def _encode_raw(arrays: Arrays) -> bytes:
    return np.ascontiguousarray(_one(arrays, "raw")).tobytes()


def _encode_npy(arrays: Arrays) -> bytes:
    return encode_npy(_one(arrays, "npy"))


def _encode_npz(arrays: Arrays, *, compress: bool = False) -> bytes:
    return encode_npz(_many(arrays), compress=compress)


def _encode_jpeg(arrays: Arrays, *, quality: int = 90) -> bytes:
    return encode_jpeg(_one(arrays, "jpeg"), quality=quality)


def _encode_png(arrays: Arrays, *, compress_level: int = 6) -> bytes:
    return encode_png(_one(arrays, "png"), compress_level=compress_level)


def _encode_webp(arrays: Arrays, *, quality: int | None = None) -> bytes:
    return encode_webp(_one(arrays, "webp"), quality=quality)


def _refuse_image(*_: Any, **__: Any) -> bytes:
    """``image`` names the files a reader lists, not one encoding to write."""
    raise ConfigError(
        "format='image' reads the image files of a class tree together (JPEG, PNG, WebP, "
        "BMP, TIFF, PPM, PGM); to write one, name its encoding: format='jpeg', "
        "format='png' or format='webp'"
    )


def _encode_hdf5(arrays: Arrays, *, chunks: bool = False, compression: str | None = None) -> bytes:
    return encode_hdf5(_many(arrays), chunks=chunks, compression=compression)


def _encode_tfrecord(arrays: Arrays, *, gzip_level: int | None = None) -> bytes:
    return encode_tfrecord(_many(arrays), gzip_level=gzip_level)


#: The image files ``format="image"`` alone reads (by Pillow): the rest of torchvision's
#: ``IMG_EXTENSIONS``.
_PILLOW_ONLY = (".bmp", ".tif", ".tiff", ".ppm", ".pgm")

FILE_FORMATS: Mapping[str, FileFormat] = {
    f.name: f
    for f in (
        FileFormat(
            name="raw", extensions=(), decoder=decode_raw, encoder=_encode_raw, zero_copy=True
        ),
        FileFormat(
            name="npy",
            extensions=(".npy",),
            decoder=decode_npy,
            encoder=_encode_npy,
            zero_copy=True,
        ),
        FileFormat(
            name="npz",
            extensions=(".npz",),
            decoder=decode_npz,
            encoder=_encode_npz,
            zero_copy=True,
        ),
        FileFormat(
            name="jpeg",
            extensions=(".jpeg", ".jpg", ".jpe", ".jfif"),
            decoder=decode_jpeg,
            encoder=_encode_jpeg,
            zero_copy=False,
        ),
        FileFormat(
            name="png",
            extensions=(".png",),
            decoder=decode_png,
            encoder=_encode_png,
            zero_copy=False,
        ),
        FileFormat(
            name="webp",
            extensions=(".webp",),
            decoder=decode_webp,
            encoder=_encode_webp,
            zero_copy=False,
        ),
        FileFormat(
            # An ImageFolder tree: photos beside PNG, WebP, BMP, TIFF, PPM and PGM files
            # (torchvision's IMG_EXTENSIONS), in one class folder or another. Each is
            # decoded by its bytes to RGB or image_mode, as ImageFolder's loader converts
            # them. The extensions after .webp are this format's alone.
            name="image",
            extensions=(".jpeg", ".jpg", ".jpe", ".jfif", ".png", ".webp", *_PILLOW_ONLY),
            decoder=decode_image,
            encoder=_refuse_image,
            zero_copy=False,
        ),
        FileFormat(
            name="hdf5",
            extensions=(".hdf5", ".h5"),
            decoder=decode_hdf5,
            encoder=_encode_hdf5,
            zero_copy=False,
        ),
        FileFormat(
            name="tar",
            extensions=(".tar",),
            decoder=decode_tar,
            encoder=encode_tar,
            zero_copy=False,
        ),
        FileFormat(
            name="tfrecord",
            extensions=(".tfrecord", ".tfrecords"),
            decoder=decode_tfrecord,
            encoder=_encode_tfrecord,
            zero_copy=False,
        ),
        FileFormat(
            name="array_record",
            extensions=(".array_record",),
            decoder=decode_array_record,
            encoder=refuse_writing,
            zero_copy=False,
        ),
    )
}
_ALIASES = {"jpg": "jpeg", "h5": "hdf5", "arrayrecord": "array_record"}
# An extension's own format: "image" lists the image formats' extensions together, and
# is the format of those it alone reads (a folder of .bmp files: format="image").
_BY_EXT = {ext: f for f in FILE_FORMATS.values() if f.name != "image" for ext in f.extensions}
_BY_EXT |= dict.fromkeys(_PILLOW_ONLY, FILE_FORMATS["image"])


def file_format(fmt: str | FileFormat) -> FileFormat:
    """The format named ``fmt`` (``npy``, ``jpg``, ...) or owning extension/path ``fmt``."""
    if isinstance(fmt, FileFormat):
        return fmt
    key = fmt.lower()
    key = _ALIASES.get(key, key)
    if key in FILE_FORMATS:
        return FILE_FORMATS[key]
    ext = os.path.splitext(key)[1] or (key if key.startswith(".") else "")
    if ext in _BY_EXT:
        return _BY_EXT[ext]
    raise ConfigError(
        f"unknown file format {fmt!r}; known: {sorted([*FILE_FORMATS, *_ALIASES])} "
        f"or a path ending in {sorted(_BY_EXT)}"
    )


#: Every file format's extensions.
EXTENSIONS = tuple(_BY_EXT)


def format_of(name: str) -> FileFormat | None:
    """The file format ``name``'s extension (in any case) says, or ``None``."""
    return _BY_EXT.get(os.path.splitext(name)[1].lower())


def formats_by_extension(names: Iterable[str]) -> dict[str, int]:
    """How many of ``names`` end in each format's extension (in any case), by format name."""
    found: dict[str, int] = {}
    for name in names:
        fmt = format_of(name)
        if fmt is not None:
            found[fmt.name] = found.get(fmt.name, 0) + 1
    return found


def decode(fmt: str | FileFormat, data: Buffer, *, name: str, **options: Any) -> Decoded:
    """Decode ``data`` (the bytes of file ``name``) as ``fmt``; options go to the decoder."""
    return file_format(fmt).decoder(data, name=name, **options)


def encode(fmt: str | FileFormat, arrays: Arrays, **options: Any) -> bytes:
    """The bytes of a ``fmt`` file holding ``arrays``; the same input gives the same bytes."""
    return file_format(fmt).encoder(arrays, **options)


def write_sample_file(
    fmt: str | FileFormat,
    path_or_buffer: str | os.PathLike[str] | IO[bytes],
    arrays: Arrays,
    **options: Any,
) -> int:
    """Write a ``fmt`` file holding ``arrays`` to a path or binary file; return its size."""
    data = encode(fmt, arrays, **options)
    if isinstance(path_or_buffer, (str, os.PathLike)):
        with open(path_or_buffer, "wb") as f:
            f.write(data)
    else:
        path_or_buffer.write(data)
    return len(data)


def synthetic_arrays(
    fmt: str | FileFormat,
    *,
    seed: int,
    shape: tuple[int, ...],
    samples_per_file: int = 1,
    dtype: str | np.dtype[Any] = "uint8",
) -> Arrays:
    """Deterministic arrays for a benchmark file of ``fmt`` from ``seed``.

    Images are ``shape`` = ``(H, W, C)`` uint8 with a smooth gradient plus
    noise, so JPEG and PNG compress like photographs rather than noise.
    Array formats get ``samples_per_file`` samples on a leading axis when it
    is over 1; NPZ, HDF5 and TFRecord name the array ``x`` and add integer labels ``y``
    (a tar shard: fields ``npy`` and ``cls``).
    """
    f = file_format(fmt)
    if samples_per_file < 1:
        raise ConfigError(f"samples_per_file must be >= 1 (got {samples_per_file=})")
    rng = np.random.default_rng(seed)
    if f.name in IMAGE_FORMATS:
        if samples_per_file != 1:
            raise ConfigError(f"{f.name} holds one image per file (got {samples_per_file=})")
        h, w = shape[0], shape[1]
        c = shape[2] if len(shape) > 2 else 1
        yy, xx = np.mgrid[0:h, 0:w]
        base = ((yy * 255) // max(h - 1, 1) + (xx * 255) // max(w - 1, 1)) // 2
        noise = rng.integers(-24, 25, size=(h, w, c))
        img = np.clip(base[:, :, None] + noise + rng.integers(0, 64, size=c), 0, 255)
        out: NDArray[np.uint8] = img.astype(np.uint8)
        return out
    full = shape if samples_per_file == 1 else (samples_per_file, *shape)
    dt = np.dtype(dtype)
    if dt.kind == "f":
        x = rng.standard_normal(full).astype(dt)
    else:
        info = np.iinfo(dt)
        x = rng.integers(info.min, int(info.max) + 1, size=full, dtype=dt)
    if f.name in ("npz", "hdf5", "tar", "tfrecord"):
        y = rng.integers(0, 1000, size=(samples_per_file,), dtype=np.int64)
        return {"npy": x, "cls": y} if f.name == "tar" else {"x": x, "y": y}
    return x
