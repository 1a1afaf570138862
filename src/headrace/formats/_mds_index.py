"""MosaicML Streaming's MDS index (``index.json``, version 2) and column encodings.

A dataset is a folder or prefix holding ``index.json`` and its shards. The index
lists the shards in order, each with its ``column_names``, ``column_encodings``,
``column_sizes`` (bytes of a fixed-size column, ``null`` for a variable one),
``samples``, ``raw_data`` (``basename``, ``bytes``, ``hashes``), ``compression``
and ``zip_data``, and ``format: "mds"``. A compressed shard (``compression``:
``"zstd"``, ``"gz:9"``...) is stored whole as one stream, named by ``zip_data``
(``basename``, ``bytes``, ``hashes``); its ``raw_data`` describes the shard once
decompressed, which is not stored. This module parses and checks it; no shard is
read here. What is read and what is refused, and why, is in docs/files.md.

A shard file (Streaming's ``MDSWriter.encode_joint_shard``): uint32 ``num_samples``,
``num_samples + 1`` uint32 offsets from the file's start, the writer's config as
JSON, then the samples; a sample is one uint32 size per variable-size column, then
every column's bytes in column order.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Literal, TypeGuard

import numpy as np
from numpy.typing import NDArray

from headrace.errors import ConfigError, FormatError
from headrace.formats._mds_codecs import codec_family

__all__ = [
    "VALUE_DTYPES",
    "Column",
    "Kind",
    "MDSIndex",
    "MDSShard",
    "check_selected",
    "decode_ndarray",
    "parse_index",
    "refusal",
]

Kind = Literal["scalar", "bytes", "str", "json", "ndarray", "jpeg", "png"]

#: Scalar encodings and their (little-endian: Streaming writes NumPy's native) dtypes.
_SCALARS = {
    **{n: n for n in ("uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64")},
    **{n: n for n in ("float16", "float32", "float64")},
    "int": "int64",  # Streaming's Int: a Python int stored as int64
}
#: The dtypes an ``ndarray`` column may hold (Streaming's NDArray value dtypes).
_NDARRAY_DTYPES = frozenset(_SCALARS) - {"int"}
#: A variable ndarray's dtype byte (Streaming's NDArray._int2value_dtype).
VALUE_DTYPES = {8: "uint8", 9: "int8", 16: "uint16", 17: "int16", 18: "float16", 32: "uint32",
                33: "int32", 34: "float32", 64: "uint64", 65: "int64", 66: "float64"}  # fmt: skip
_AS_BYTES: dict[str, Kind] = {"bytes": "bytes", "str": "str", "json": "json"}
#: A shard's sample count and offsets are uint32s: no shard holds more samples, nor
#: (decompressed) more bytes.
_U32_MAX = 0xFFFF_FFFF
_REFUSED = {
    "pkl": (
        "unpickling runs whatever code the bytes name (pickle.loads), so a shard written "
        "by anyone who can write to the dataset's folder or bucket could run code in the "
        "training job; headrace never unpickles"
    ),
    "pil": "raw PIL images (mode and size headers) are not decoded",
    **dict.fromkeys(
        ("list[jpeg]", "list[png]", "list[pil]", "jpeg_array", "jpegarray"),
        "lists of images (Streaming's list[jpeg], list[png], list[pil] and jpeg_array) are "
        "not decoded",
    ),
    "str_int": "digits-as-text numbers are not decoded",
    "str_float": "digits-as-text numbers are not decoded",
    "str_decimal": "digits-as-text numbers are not decoded",
}


@dataclass(frozen=True, slots=True)
class Column:
    """One column: how it is encoded and how its bytes become an array."""

    name: str
    encoding: str  #: as the index writes it (``"ndarray:uint8:3,4"``, ``"jpeg:90"``)
    size: int | None  #: fixed size in bytes, ``None``: variable (a uint32 size per sample)
    kind: Kind | None  #: ``None``: an encoding headrace does not read (refused if selected)
    dtype: str | None = None  #: scalars and ndarrays of a declared dtype
    shape: tuple[int, ...] | None = None  #: ndarrays of a declared shape


@dataclass(frozen=True, slots=True)
class MDSShard:
    basename: str  #: the stored file: ``zip_data.basename`` if compressed, else ``raw_data``'s
    samples: int
    bytes: int | None  #: the stored file's size as written (``zip_data`` or ``raw_data``)
    codec: str | None = None  #: ``compression``'s family (``"zstd"``), ``None``: stored raw
    raw_bytes: int | None = None  #: a compressed shard's size decompressed (``raw_data.bytes``)
    hashes: tuple[tuple[str, str], ...] = ()  #: the stored file's (algorithm, hex digest)
    raw_hashes: tuple[tuple[str, str], ...] = ()  #: the decompressed shard's (compressed only)
    raw_name: str | None = None  #: a compressed shard's decompressed file (``raw_data``'s)
    #: The index's entry of a compressed shard read from its decompressed file instead
    #: (:func:`~headrace.formats._mds_open.read_from`): what the dataset's fingerprint names.
    listed: MDSShard | None = None


@dataclass(frozen=True, slots=True)
class MDSIndex:
    columns: tuple[Column, ...]
    shards: tuple[MDSShard, ...]


def _column(name: str, encoding: str, size: object, where: str) -> Column:
    """The column ``name`` encoded as ``encoding``, checked against its index ``size``."""
    base, _, args = encoding.partition(":")
    kind: Kind | None = None
    dtype: str | None = None
    shape: tuple[int, ...] | None = None
    fixed: int | None = None
    if encoding in _SCALARS:
        kind, dtype = "scalar", _SCALARS[encoding]
        fixed = np.dtype(dtype).itemsize
    elif encoding in _AS_BYTES:
        kind = _AS_BYTES[encoding]
    elif base in ("jpeg", "png") and (base == "jpeg" or not args):
        kind = "jpeg" if base == "jpeg" else "png"  # jpeg:QUALITY is the writer's setting
    elif base == "ndarray":
        parts = args.split(":") if args else []
        if len(parts) > 2 or (parts and parts[0] not in _NDARRAY_DTYPES):
            raise FormatError(
                f"{where}: column {name!r}: encoding {encoding!r} is not ndarray, "
                "ndarray:DTYPE or ndarray:DTYPE:D0,D1,... with DTYPE one of "
                f"{sorted(_NDARRAY_DTYPES)}"
            )
        kind = "ndarray"
        dtype = parts[0] if parts else None
        if len(parts) == 2:
            try:
                shape = tuple(int(d) for d in parts[1].split(","))
            except ValueError:
                shape = ()
            if not shape or min(shape) < 1:
                raise FormatError(
                    f"{where}: column {name!r}: encoding {encoding!r}: the shape must be "
                    "dimensions >= 1 separated by commas"
                )
            fixed = math.prod(shape) * np.dtype(dtype).itemsize  # (np.prod wraps past 2**63)
    if isinstance(size, bool) or (size is not None and not isinstance(size, int)):
        raise FormatError(f"{where}: column {name!r}: column_sizes holds {size!r}, not a count")
    if kind is None and base not in _REFUSED:
        # An encoding of the user's, registered with Streaming (its encodings' table):
        # its bytes are placed by column_sizes as MDSWriter wrote them (the Encoding's
        # size), so the columns beside it read; it is refused only if read (refusal).
        if size is not None and size < 0:
            raise FormatError(
                f"{where}: column {name!r} ({encoding}): column_sizes holds {size}, not a "
                "size in bytes"
            )
        fixed = size
    # The encodings refused are checked too (each variable, as Streaming writes it): a
    # size given to one placed every column after it.
    if size != fixed:
        raise FormatError(
            f"{where}: column {name!r} ({encoding}): column_sizes says "
            f"{'variable' if size is None else f'{size} bytes'}, the encoding "
            f"{'variable' if fixed is None else f'{fixed} bytes'}"
        )
    return Column(name, encoding, size, kind, dtype, shape)


def refusal(column: Column) -> str | None:
    """Why ``column`` cannot be read (``None``: it can)."""
    if column.kind is not None:
        return None
    why = _REFUSED.get(column.encoding.partition(":")[0]) or (
        "no encoding headrace decodes (a custom Encoding registered with Streaming?); it reads "
        + ", ".join([*_SCALARS, *_AS_BYTES, "ndarray", "jpeg", "png"])
    )
    return f"column {column.name!r} has encoding {column.encoding!r}: {why}"


def _get(obj: dict[str, Any], key: str, where: str) -> Any:
    if key not in obj:
        raise FormatError(f"{where}: no {key!r} in the shard's entry (an MDS index has one)")
    return obj[key]


def _normal(name: object) -> object:
    """``name`` without its ``.`` parts (Streaming's ``merge_index`` writes
    ``./shard.00000.mds`` for a part's index given as a bare ``index.json``): a folder
    reads it as the object-store key that a prefix lists, ``shard.00000.mds``."""
    if not isinstance(name, str):
        return name
    return "/".join(p for p in name.split("/") if p != ".")


def _is_name(name: object) -> TypeGuard[str]:
    """Whether ``name`` names a file under the index's folder."""
    return (
        isinstance(name, str)
        and bool(name)
        and not name.startswith("/")
        and ".." not in name.split("/")
    )


def _count(value: object, what: str, at: str) -> int | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise FormatError(f"{at}: {what} is {value!r}, not a count")
    return value


def _hashes(info: dict[str, Any], what: str, at: str) -> tuple[tuple[str, str], ...]:
    hashes = info.get("hashes") or {}
    if not isinstance(hashes, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in hashes.items()
    ):
        raise FormatError(f"{at}: {what}.hashes is {hashes!r}, not {{algorithm: hex digest}}")
    return tuple(sorted(hashes.items()))


def parse_index(data: bytes | memoryview, where: str) -> MDSIndex:
    """The columns and shards of ``index.json``'s bytes; ``where`` names it in errors."""
    try:
        obj = json.loads(bytes(data))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise FormatError(f"{where}: not JSON ({exc})") from exc
    if not isinstance(obj, dict) or not isinstance(obj.get("shards"), list):
        raise FormatError(f"{where}: not a Streaming index (no 'shards' list)")
    if obj.get("version") != 2:
        raise FormatError(
            f"{where}: index version {obj.get('version')!r}; headrace reads Streaming's version 2"
        )
    if not obj["shards"]:
        raise FormatError(f"{where}: the index lists no shards")
    columns: tuple[Column, ...] | None = None
    first = ""
    shards = []
    for i, entry in enumerate(obj["shards"]):
        if not isinstance(entry, dict):
            raise FormatError(f"{where}: shard {i} is {type(entry).__name__}, not an object")
        raw = entry.get("raw_data") or {}
        listed = raw.get("basename") if isinstance(raw, dict) else None
        name = _normal(listed)
        at = f"{where}: shard {i} ({listed or 'no raw_data.basename'})"
        if entry.get("format") != "mds":
            raise FormatError(
                f"{at}: format {entry.get('format')!r}; headrace reads 'mds' shards only "
                "(Streaming's 'xsv' and 'json' shards are not read)"
            )
        if entry.get("version", 2) != 2:
            raise FormatError(f"{at}: shard version {entry['version']!r}; headrace reads 2")
        if not _is_name(name):
            raise FormatError(f"{at}: raw_data.basename must name a file under the index's folder")
        count = _get(entry, "samples", at)
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise FormatError(f"{at}: samples is {count!r}, not a count")
        if count > _U32_MAX:  # (2**63 and more failed at open in NumPy, naming nothing)
            raise FormatError(
                f"{at}: samples is {count}; a shard counts its samples in 32 bits (at most "
                f"{_U32_MAX:,}): the index is damaged"
            )
        size = _count(raw.get("bytes"), "raw_data.bytes", at)
        if size is not None and size > _U32_MAX:
            # (Uncompressed, it was refused at its first read as "offsets not increasing".)
            raise FormatError(
                f"{at}: raw_data.bytes is {size}; a shard's offsets are 32-bit, so it "
                f"holds at most {_U32_MAX:,} bytes (decompressed): MDSWriter wraps the "
                "offsets of a larger one (size_limit=None or above 4 GiB), which Streaming "
                "cannot read either; write the dataset again with a lower size_limit"
            )
        codec = entry.get("compression")
        if codec:
            family = codec_family(codec, at)
            zipped = entry.get("zip_data")
            zname = _normal(zipped.get("basename")) if isinstance(zipped, dict) else None
            if not _is_name(zname):
                raise FormatError(
                    f"{at}: compressed ({codec!r}) but zip_data.basename does not name a "
                    "file under the index's folder"
                )
            assert isinstance(zipped, dict)
            if size is None:
                raise FormatError(
                    f"{at}: compressed ({codec!r}) but raw_data.bytes is missing: the size "
                    "its decompressed bytes are checked against"
                )
            shard = MDSShard(
                zname,
                count,
                _count(zipped.get("bytes"), "zip_data.bytes", at),
                family,
                size,
                _hashes(zipped, "zip_data", at),
                _hashes(raw, "raw_data", at),
                name,
            )
        else:
            shard = MDSShard(name, count, size)
        names, encodings, sizes = (
            _get(entry, k, at) for k in ("column_names", "column_encodings", "column_sizes")
        )
        if not (
            isinstance(names, list)
            and isinstance(encodings, list)
            and isinstance(sizes, list)
            and len(names) == len(encodings) == len(sizes)
            and all(isinstance(x, str) for x in [*names, *encodings])
        ):
            raise FormatError(
                f"{at}: column_names, column_encodings and column_sizes must be lists of "
                "one entry a column (names and encodings strings)"
            )
        cols = tuple(_column(n, e, s, at) for n, e, s in zip(names, encodings, sizes, strict=True))
        if columns is None:
            columns, first = cols, at
        elif cols != columns:
            raise FormatError(
                f"{at}: columns {[(c.name, c.encoding) for c in cols]} differ from those of "
                f"{first}, {[(c.name, c.encoding) for c in columns]}; headrace reads "
                "datasets whose shards share their columns"
            )
        shards.append(shard)
    assert columns is not None
    if len({c.name for c in columns}) != len(columns):
        raise FormatError(f"{first}: a column is named twice in {[c.name for c in columns]}")
    return MDSIndex(columns, tuple(shards))


def check_selected(index: MDSIndex, columns: list[str] | None, where: str) -> list[Column]:
    """The columns ``columns`` names (``None``: all), each one headrace reads."""
    by = {c.name: c for c in index.columns}
    names = list(by) if columns is None else columns
    unknown = [c for c in names if c not in by]
    if unknown:
        raise ConfigError(f"{where}: unknown column(s) {unknown}; the shards hold {list(by)}")
    if len(set(names)) != len(names):
        raise ConfigError(f"{where}: a column is named twice in columns={names}")
    if not names:
        raise ConfigError(f"{where}: columns=[] reads nothing; name at least one column")
    if "index" in names:
        raise ConfigError(
            f"{where}: column 'index' would hide the batch's 'index' (each sample's number "
            "in dataset order); leave it out with columns=[...]"
        )
    refused = [why for n in names if (why := refusal(by[n])) is not None]
    if refused:
        raise FormatError(
            f"{where}: " + "; ".join(refused) + "; leave such columns out with columns=[...]"
        )
    return [by[n] for n in names]


def decode_ndarray(c: Column, b: NDArray[np.uint8], where: str) -> NDArray[Any]:
    """An ``ndarray`` column's value: its declared dtype and shape, or those its bytes
    state first (a dtype byte, then ``ndim << 2 | shape width`` and the shape)."""
    at = 0
    dtype = c.dtype
    if dtype is None:
        code = int(b[0]) if len(b) else -1
        if code not in VALUE_DTYPES:
            raise FormatError(f"{where}: dtype byte {code} names no ndarray dtype")
        dtype, at = VALUE_DTYPES[code], 1
    shape = c.shape
    if shape is None:
        if len(b) <= at:
            raise FormatError(f"{where}: {len(b)} bytes end before the array's shape")
        byte = int(b[at])
        ndim, width = byte >> 2, 1 << (byte & 3)
        end = at + 1 + ndim * width
        if end > len(b):
            raise FormatError(f"{where}: {len(b)} bytes end inside the array's shape")
        shape = tuple(np.frombuffer(b[at + 1 : end], np.dtype(f"<u{width}")).tolist())
        at = end
    item = np.dtype(dtype).itemsize
    want = math.prod(shape) * item  # Python ints: NumPy's product wrapped past 2**63
    if len(b) - at != want:
        raise FormatError(
            f"{where}: {len(b) - at} bytes of values, an array {dtype} {shape} is {want}"
        )
    return np.frombuffer(b[at:], np.dtype(dtype).newbyteorder("<")).astype(dtype).reshape(shape)
