"""NPY and NPZ: zero-copy decoding with a validated header, and deterministic writing.

Sample schema
-------------
* ``.npy``: one array with the header's dtype and shape (Fortran order kept).
  A file holding ``samples_per_file > 1`` samples stores them on a leading
  axis: shape ``(samples_per_file, *sample_shape)``.
* ``.npz``: a ``dict`` from member name (without ``.npy``) to array, each
  as for ``.npy``; several samples per file again use a leading axis.

``decode_npy`` and the stored (uncompressed) members of ``decode_npz`` return
views of the caller's buffer: no byte is copied. Deflated members are
inflated once, into the buffer the array then views.
"""

from __future__ import annotations

import ast
import io
import math
import re
import struct
import threading
import zipfile
import zlib
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache

import numpy as np
from numpy.typing import NDArray

from headrace.errors import DataError, FormatError
from headrace.formats._buffer import Buffer, BufferReader, as_bytes_view
from headrace.formats._inflate import inflate

__all__ = [
    "NPY_HEAD",
    "decode_npy",
    "decode_npz",
    "encode_npy",
    "encode_npz",
    "npy_rows",
    "npz_rows",
]

_NPY_MAGIC = b"\x93NUMPY"
_ZIP_LOCAL = b"PK\x03\x04"
_ZIP_EMPTY = b"PK\x05\x06"
# zip files carry timestamps; a fixed one makes the writer deterministic.
_ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)
#: The bytes of an NPY header as NumPy writes it for most arrays (a multiple of 64).
NPY_HEAD = 128
# Compressed bytes read at a time to inflate a member's NPY header (~100 bytes deflated).
_INFLATE_STEP = 512
# A Python 2 long in a header's shape: ``(3L, 4L)``.
_PY2_LONG = re.compile(r"\b(\d+)L\b")


_EVAL_LOCK = threading.Lock()


#: The most bytes an array may claim: what a file's size (an off_t) can hold.
_MAX_BYTES = 2**63 - 1

#: What zipfile raises for a damaged directory. NotImplementedError is one: an entry
#: whose "version needed to extract" byte is past 6.3 (one flipped bit) is refused as
#: a zip feature it lacks.
_ZIP_ERRORS = (
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    ValueError,
    EOFError,
    OSError,
    NotImplementedError,
)


@lru_cache(maxsize=256)
def _literal(text: str, major: int) -> object:
    """The header's dict: ``ast.literal_eval(text)``, one call at a time, remembered
    (never mutate the result); version 1.0 headers written by Python 2 NumPy say ``3L``.

    One at a time: CPython 3.11 keeps the AST builder's recursion depth per
    interpreter, not per thread, so decode threads evaluating headers at once
    failed now and then with ``SystemError: AST constructor recursion depth
    mismatch`` (python/cpython#106905; met once in a soak, 8 decode threads).
    Remembered: a dataset's files mostly share a few headers, so the lock is
    rarely taken.
    """
    with _EVAL_LOCK:
        try:
            return ast.literal_eval(text)
        except SyntaxError:
            if major != 1 or not _PY2_LONG.search(text):
                raise
            # np.load accepts these too (with a warning); only integers ending in L change.
            return ast.literal_eval(_PY2_LONG.sub(r"\1", text))


def _parse_npy_header(
    view: memoryview, where: str, leave_out: str = ""
) -> tuple[np.dtype[np.generic], tuple[int, ...], bool, int]:
    """Validate an NPY header; return dtype, shape, Fortran order and payload offset
    (``leave_out``: how to leave an object array out, said where one is refused)."""
    head = bytes(view[:6])
    if head != _NPY_MAGIC and not (len(view) < 6 and _NPY_MAGIC.startswith(head)):
        # Checked before the length: a short member that is not NPY at all (an NPZ's
        # JSON metadata) is named as such, not as a truncated header.
        raise FormatError(
            f"{where}: not an NPY file: starts with {head!r}, expected {_NPY_MAGIC!r}"
        )
    if len(view) < 10:
        raise FormatError(f"{where}: truncated: {len(view)} bytes, shorter than an NPY header")
    major = view[6]
    if major == 1:
        (hlen,) = struct.unpack_from("<H", view, 8)
        start = 10
    elif major in (2, 3):
        if len(view) < 12:
            raise FormatError(f"{where}: truncated: {len(view)} bytes, shorter than an NPY header")
        (hlen,) = struct.unpack_from("<I", view, 8)
        start = 12
    else:
        raise FormatError(
            f"{where}: unsupported NPY version {major}.{view[7]} (expected 1, 2 or 3)"
        )
    end = start + hlen
    if end > len(view):
        raise FormatError(
            f"{where}: truncated: header says {hlen} header bytes, found {len(view) - start}"
        )
    try:
        text = bytes(view[start:end]).decode("utf-8" if major == 3 else "latin1")
        header = _literal(text, major)
    except (UnicodeDecodeError, ValueError, SyntaxError, MemoryError, RecursionError) as exc:
        raise FormatError(f"{where}: corrupt NPY header ({exc})") from exc
    if not isinstance(header, dict) or set(header) != {"descr", "fortran_order", "shape"}:
        raise FormatError(
            f"{where}: corrupt NPY header: expected a dict with keys descr, fortran_order, "
            f"shape; found {text.strip()[:120]!r}"
        )
    shape = header["shape"]
    if not isinstance(shape, tuple) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
    ):
        raise FormatError(f"{where}: corrupt NPY header: bad shape {shape!r}")
    if not isinstance(header["fortran_order"], bool):
        raise FormatError(
            f"{where}: corrupt NPY header: bad fortran_order {header['fortran_order']!r}"
        )
    try:
        dtype = np.lib.format.descr_to_dtype(header["descr"])
    except (TypeError, ValueError) as exc:
        raise FormatError(f"{where}: corrupt NPY header: bad descr {header['descr']!r}") from exc
    if dtype.hasobject:
        # Object arrays are pickles: arbitrary code on load, and never zero-copy.
        raise FormatError(
            f"{where}: NPY holds Python objects (dtype {dtype}); refusing to unpickle "
            "(allow_pickle stays off: loading a pickle runs code). Save it with a numeric "
            "or fixed-width string dtype (ragged samples: pad them, or one array per sample)"
            + (f", or {leave_out}" if leave_out else "")
        )
    if any(d > _MAX_BYTES for d in shape) or math.prod(shape) * dtype.itemsize > _MAX_BYTES:
        # A forged length: NumPy cannot size such an array (OverflowError downstream,
        # where the counts are summed), and no file holds it.
        raise FormatError(
            f"{where}: corrupt NPY header: shape {shape!r} of {dtype} is more than 2**63 - 1 "
            "bytes, more than any file holds"
        )
    return dtype, shape, header["fortran_order"], end


def _npy_from_view(view: memoryview, where: str, leave_out: str = "") -> NDArray[np.generic]:
    dtype, shape, fortran, offset = _parse_npy_header(view, where, leave_out)
    count = 1
    for d in shape:
        count *= d
    want = count * dtype.itemsize
    found = len(view) - offset
    if found != want:
        what = "truncated" if found < want else "corrupt"
        raise FormatError(
            f"{where}: {what}: header says {want} data bytes ({dtype}, shape {shape}), "
            f"found {found}"
        )
    if dtype.itemsize == 0:
        # np.save writes zero-size items ('V0', 'S0', 'U0') with no payload; frombuffer
        # refuses them, so make the (empty-valued) array as np.load does (np.zeros
        # would widen 'U0' to 'U1').
        empty: NDArray[np.generic] = np.ndarray(shape, dtype=dtype)
        return empty
    flat = np.frombuffer(view, dtype=dtype, count=count, offset=offset)
    return flat.reshape(shape, order="F" if fortran else "C")


def decode_npy(data: Buffer, *, name: str) -> NDArray[np.generic]:
    """Decode one ``.npy`` file held in ``data``; the array views ``data`` (no copy).

    The array is read-only when ``data`` is (``bytes``, a read-only map).
    Raises :class:`FormatError` naming ``name`` for a wrong magic, a corrupt
    header, object dtypes, or a payload whose size disagrees with the header.
    """
    return _npy_from_view(as_bytes_view(data, name), name)


def _zip_infos(view: memoryview, name: str) -> list[zipfile.ZipInfo]:
    head = bytes(view[:4])
    if head not in (_ZIP_LOCAL, _ZIP_EMPTY):
        raise FormatError(
            f"{name}: not an NPZ (zip) file: starts with {head!r}, expected {_ZIP_LOCAL!r}"
        )
    try:
        with zipfile.ZipFile(BufferReader(view)) as zf:
            return zf.infolist()
    except _ZIP_ERRORS as exc:
        raise FormatError(
            f"{name}: truncated or corrupt NPZ: cannot read the zip directory at the end of "
            f"the file ({exc})"
        ) from exc


def _member_raw(view: memoryview, info: zipfile.ZipInfo, name: str) -> memoryview:
    """A member's bytes as stored (deflated or not), its local header checked."""
    where = f"{name}: member {info.filename!r}"
    if info.flag_bits & 0x1:
        raise FormatError(f"{where} is encrypted")
    off = info.header_offset
    if off + 30 > len(view) or bytes(view[off : off + 4]) != _ZIP_LOCAL:
        raise FormatError(
            f"{where}: corrupt: no local file header at byte {off} (file has {len(view)} bytes)"
        )
    name_len, extra_len = struct.unpack_from("<HH", view, off + 26)
    _check_local_name(bytes(view[off + 30 : off + 30 + name_len]), info, where)
    start = off + 30 + name_len + extra_len
    end = start + info.compress_size
    if end > len(view):
        raise FormatError(
            f"{where} truncated: directory says {info.compress_size} bytes at [{start}, {end}), "
            f"found {max(0, len(view) - start)}"
        )
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise FormatError(
            f"{where}: unsupported zip compression method {info.compress_type} "
            "(expected 0 stored or 8 deflated)"
        )
    return view[start:end]


def _member_bytes(
    view: memoryview, info: zipfile.ZipInfo, name: str, check_crc: bool
) -> memoryview:
    where = f"{name}: member {info.filename!r}"
    raw = _member_raw(view, info, name)
    if info.compress_type == zipfile.ZIP_DEFLATED:
        # Into the array's own buffer, piece by piece (checked as it goes).
        out = np.empty(info.file_size, np.uint8)

        def put(at: int, piece: bytes) -> None:
            out[at : at + len(piece)] = np.frombuffer(piece, np.uint8)

        inflate(raw, info.file_size, info.CRC, where, put)
        out.setflags(write=False)  # as the bytes it was inflated into before
        return out.data
    if len(raw) != info.file_size:
        raise FormatError(
            f"{where}: corrupt: directory says {info.file_size} bytes uncompressed, "
            f"found {len(raw)}"
        )
    if check_crc:
        crc = zlib.crc32(raw)
        if crc != info.CRC:
            raise FormatError(
                f"{where}: corrupt: CRC-32 is {crc:08x}, directory says {info.CRC:08x}"
            )
    return raw


def decode_npz(
    data: Buffer,
    *,
    name: str,
    keys: Sequence[str] | None = None,
    check_crc: bool = True,
    rows: NDArray[np.int64] | None = None,
    count: tuple[int, str] | None = None,
) -> dict[str, NDArray[np.generic]]:
    """Decode an ``.npz`` file (stored or deflated members) into ``{key: array}``.

    ``keys`` picks members by name without the ``.npy`` suffix (all when
    ``None``); a missing key raises :class:`FormatError` listing those present.
    Stored members are views of ``data``. ``check_crc`` verifies each stored
    member's CRC-32 (about 0.4 ms per MiB); deflated members are always checked.
    ``rows`` (increasing): only those samples of each array's leading axis, which
    must hold ``count[0]`` (a :class:`DataError` saying ``count[1]`` gives it);
    a deflated member is inflated whole (checked as always) but only they are kept.
    """
    view = as_bytes_view(data, name)
    infos = {
        (i.filename[:-4] if i.filename.endswith(".npy") else i.filename): i
        for i in _zip_infos(view, name)
        if not i.is_dir()
    }
    wanted = list(infos) if keys is None else list(keys)
    missing = [k for k in wanted if k not in infos]
    if missing:
        raise FormatError(f"{name}: no member(s) {missing} in NPZ; it holds {sorted(infos)}")
    out: dict[str, NDArray[np.generic]] = {}
    for key in wanted:
        info = infos[key]
        where = f"{name}: member {info.filename!r}"
        if rows is not None and info.compress_type == zipfile.ZIP_DEFLATED:
            out[key] = _deflated_rows(view, info, name, key, infos, rows, count)
            continue
        payload = _member_bytes(view, info, name, check_crc)
        _check_npy_member(payload, name, info.filename, infos)
        arr = _npy_from_view(payload, where, _leave_out(key, infos))
        if rows is not None:
            _check_rows(arr.shape, rows, count, name, key)
            r0, r1 = (int(rows[0]), int(rows[-1]) + 1) if len(rows) else (0, 0)
            # A run of rows is a view of the file (stored: no copy); else those rows.
            arr = arr[r0:r1] if r1 - r0 == len(rows) else arr[rows]
        out[key] = arr
    return out


def _check_rows(
    shape: tuple[int, ...],
    rows: NDArray[np.int64],
    count: tuple[int, str] | None,
    name: str,
    key: str,
) -> None:
    """The leading axis must hold ``count[0]`` samples (as ``count[1]`` says), and
    ``rows`` must lie on it."""
    if count is not None and (not shape or shape[0] != count[0]):
        raise DataError(
            f"{name}: {key!r} has shape {shape}; expected {count[0]} samples on its leading "
            f"axis ({count[1]})"
        )
    if not shape:
        raise DataError(f"{name}: {key!r} is a 0-d array (shape ()): it has no rows to read")
    if len(rows) and not 0 <= int(rows[0]) <= int(rows[-1]) < shape[0]:
        raise DataError(
            f"{name}: {key!r} has shape {shape}; rows {int(rows[0])} to {int(rows[-1])} "
            f"asked, expected rows in [0, {shape[0]})"
        )


def _deflated_rows(
    view: memoryview,
    info: zipfile.ZipInfo,
    name: str,
    key: str,
    infos: Mapping[str, object],
    rows: NDArray[np.int64],
    count: tuple[int, str] | None,
) -> NDArray[np.generic]:
    """Rows ``rows`` of a deflated member's array: the member is inflated whole, its
    length and CRC checked (a file fails or passes in every read order), but only
    those rows are kept. A read of 2 rows of a 64-row member held all 64 until its
    batch was stacked (as views of it), and twice that while it was inflated."""
    where = f"{name}: member {info.filename!r}"
    leave_out = _leave_out(key, infos)
    raw = _member_raw(view, info, name)
    reader = BufferReader(view)
    head = _member_head(reader, info, where, NPY_HEAD)
    _check_npy_member(memoryview(head), name, info.filename, infos)
    end = _header_end(memoryview(head))
    if end is not None and end > len(head):
        head = _member_head(reader, info, where, end)
    dtype, shape, fortran, offset = _parse_npy_header(memoryview(head), where, leave_out)
    _check_rows(shape, rows, count, name, key)
    row = dtype.itemsize * math.prod(shape[1:])
    if not row or (fortran and len(shape) > 1):  # rows are not runs of bytes: whole
        payload = _member_bytes(view, info, name, True)
        return _npy_from_view(payload, where, leave_out)[rows]
    out = np.empty((len(rows), *shape[1:]), dtype)
    flat = out.reshape(-1).view(np.uint8)
    # Runs of consecutive rows, each one copy: (member offset, offset in out, bytes).
    cuts = np.flatnonzero(np.diff(rows) != 1) + 1
    firsts = np.concatenate(([0], cuts)).astype(np.int64)
    lasts = np.concatenate((cuts, [len(rows)])).astype(np.int64)
    src = offset + rows[firsts] * row
    dst = firsts * row
    src_end = src + (lasts - firsts) * row

    def keep(at: int, piece: bytes) -> None:
        stop = at + len(piece)
        got = np.frombuffer(piece, np.uint8)
        first = int(np.searchsorted(src_end, at, side="right"))
        for k in range(first, int(np.searchsorted(src, stop, side="left"))):
            a, b = max(at, int(src[k])), min(stop, int(src_end[k]))
            d = int(dst[k]) + a - int(src[k])
            flat[d : d + b - a] = got[a - at : b - at]

    inflate(raw, info.file_size, info.CRC, where, keep)
    want, found = shape[0] * row, info.file_size - offset
    if found != want:
        what = "truncated" if found < want else "corrupt"
        raise FormatError(
            f"{where}: {what}: header says {want} data bytes ({dtype}, shape {shape}), "
            f"found {found}"
        )
    out.setflags(write=False)  # as a whole decode's arrays
    return out


def _leave_out(key: str, infos: Mapping[str, object]) -> str:
    """How to read an NPZ without member ``key``: name the others."""
    rest = tuple(k for k in infos if k != key)
    return (
        f"leave it out: FileSource(..., datasets={rest!r}) (decode_npz: keys={list(rest)!r})"
        if rest
        else "leave the file out"
    )


def _check_local_name(found: bytes, info: zipfile.ZipInfo, where: str) -> None:
    """The local header at the directory's offset must name the member the directory
    does (zipfile checks it too): else the directory is damaged, and its offset,
    sizes and CRC may all describe another member."""
    text = found.decode("utf-8" if info.flag_bits & 0x800 else "cp437", "replace")
    if text != info.orig_filename:
        raise FormatError(
            f"{where}: corrupt: the zip directory places it at byte {info.header_offset}, "
            f"where the local header names {text!r}: the directory is damaged"
        )


def _check_npy_member(
    payload: memoryview, name: str, member: str, infos: Mapping[str, object]
) -> None:
    if len(payload) >= 6 and bytes(payload[:6]) != _NPY_MAGIC:
        # np.load hands such a member back as bytes; a batch needs arrays.
        raise FormatError(
            f"{name}: member {member!r} is not an array: it does not start with "
            f"the NPY magic ({bytes(payload[:8])!r}); headrace reads NPY members only: "
            f"pick the arrays with keys=[...] (FileSource: datasets=(...)) (it holds "
            f"{sorted(infos)}), or leave other files out of the NPZ"
        )


def _header_end(head: memoryview) -> int | None:
    """Where an NPY header ends, by its length field (``None``: too short to say)."""
    if len(head) >= 10 and head[6] == 1:
        return 10 + int(struct.unpack_from("<H", head, 8)[0])
    if len(head) >= 12 and head[6] in (2, 3):
        return 12 + int(struct.unpack_from("<I", head, 8)[0])
    return None


def _rows(shape: tuple[int, ...], where: str) -> int:
    if not shape:
        raise FormatError(
            f"{where}: a 0-d array (shape ()): it has no leading axis to count samples on"
        )
    return shape[0]


def npy_header(
    at: Callable[[int, int], memoryview], name: str
) -> tuple[np.dtype[np.generic], tuple[int, ...], bool, int]:
    """An NPY file's dtype, shape, Fortran order and payload offset from its header alone.

    ``at(offset, length)``: the file's bytes there (fewer at its end). The first
    ``NPY_HEAD`` bytes are the whole header as NumPy writes it for most arrays (it
    pads headers to a multiple of 64 bytes); a longer one (many-field structured
    dtypes) is read on up to its end. One that does not parse is a
    :class:`FormatError` naming ``name``.
    """
    head = at(0, NPY_HEAD)
    end = _header_end(head)
    if end is not None and end > len(head):
        head = at(0, end)
    return _parse_npy_header(head, name)


def refuse_npy_as_raw(at: Callable[[int, int], memoryview], name: str, what: str, fix: str) -> None:
    """Refuse an NPY file about to be read as raw ``what``: its header would be read as
    data. Raw bytes that merely start like the magic (no header parses) pass."""
    if bytes(at(0, 6)) != _NPY_MAGIC:
        return
    try:
        dtype, shape, _, offset = npy_header(at, name)
    except FormatError:
        return
    raise FormatError(
        f"{name}: an NPY file (shape {shape}, {dtype}, after a {offset}-byte header), not raw "
        f"{what}: its header would be read as {what}. {fix}"
    )


def npy_rows(at: Callable[[int, int], memoryview], *, name: str) -> int:
    """The leading axis of an NPY file's array from its header alone (:func:`npy_header`);
    a 0-d array is a :class:`FormatError` naming ``name``."""
    _, shape, _, _ = npy_header(at, name)
    return _rows(shape, name)


def _member_head(file: io.RawIOBase, info: zipfile.ZipInfo, where: str, want: int) -> bytes:
    """The first ``want`` bytes of a member (fewer if it is shorter), inflated if deflated:
    read from its local header on, in small steps (not zipfile's 4 KiB read-ahead,
    which crossed into a second ranged GET for a 12-byte read)."""
    if info.header_offset < 0:
        # zipfile shifts every member's offset by the gap between where the directory
        # says it starts and where it ends (bytes prepended to the archive), so a forged
        # directory offset in the end record shows here as a member before byte 0.
        raise FormatError(
            f"{where}: corrupt zip directory: it puts the member's local header at byte "
            f"{info.header_offset}, before the start of the file (expected 0 or more; the end "
            "record's directory offset or size is wrong)"
        )
    file.seek(info.header_offset)
    local = file.read(30) or b""
    if len(local) < 30 or local[:4] != _ZIP_LOCAL:
        raise FormatError(f"{where}: corrupt: no local file header at byte {info.header_offset}")
    name_len, extra_len = struct.unpack_from("<HH", local, 26)
    _check_local_name(file.read(name_len) or b"", info, where)
    file.seek(info.header_offset + 30 + name_len + extra_len)
    if info.compress_type == zipfile.ZIP_STORED:
        return file.read(min(want, info.compress_size)) or b""
    inflater = zlib.decompressobj(-zlib.MAX_WBITS)
    out, left = b"", info.compress_size
    try:
        while len(out) < want and not inflater.eof:
            data = inflater.unconsumed_tail
            if not data:
                data = file.read(min(left, _INFLATE_STEP)) or b""
                left -= len(data)
                if not data:
                    break
            out += inflater.decompress(data, want - len(out))
    except zlib.error as exc:
        raise FormatError(f"{where}: corrupt deflate stream ({exc})") from exc
    return out


def npz_rows(file: io.RawIOBase, *, name: str, key: str | None) -> int:
    """The leading axis of member ``key`` (``None``: the first) of an NPZ, from the
    zip's directory and that member's NPY header alone (a deflated member's first
    bytes are inflated: the header comes first). ``file``: seekable, read on demand.
    """
    try:
        zf = zipfile.ZipFile(file)
    except _ZIP_ERRORS as exc:
        # Its first bytes, read only now: the member counted is seldom the first one.
        file.seek(0)
        head = file.read(4)
        if head not in (_ZIP_LOCAL, _ZIP_EMPTY):
            raise FormatError(
                f"{name}: not an NPZ (zip) file: starts with {head!r}, expected {_ZIP_LOCAL!r}"
            ) from exc
        raise FormatError(
            f"{name}: truncated or corrupt NPZ: cannot read the zip directory at the end of "
            f"the file ({exc})"
        ) from exc
    with zf:
        infos = {
            (i.filename[:-4] if i.filename.endswith(".npy") else i.filename): i
            for i in zf.infolist()
            if not i.is_dir()
        }
        if key is None:
            if not infos:
                raise FormatError(f"{name}: an NPZ with no arrays: no samples to count")
            key = next(iter(infos))
        if key not in infos:
            raise FormatError(f"{name}: no member(s) {[key]} in NPZ; it holds {sorted(infos)}")
        info = infos[key]
        where = f"{name}: member {info.filename!r}"
        if info.flag_bits & 0x1:
            raise FormatError(f"{where} is encrypted")
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise FormatError(
                f"{where}: unsupported zip compression method {info.compress_type} "
                "(expected 0 stored or 8 deflated)"
            )
    payload = _member_head(file, info, where, 12)
    _check_npy_member(memoryview(payload), name, info.filename, infos)
    end = _header_end(memoryview(payload))
    if end is not None and end > len(payload):
        payload = _member_head(file, info, where, end)
    _, shape, _, _ = _parse_npy_header(memoryview(payload), where, _leave_out(key, infos))
    return _rows(shape, where)


def encode_npy(array: NDArray[np.generic]) -> bytes:
    """The bytes of ``np.save(array)`` (format 1.0 when it fits), deterministic."""
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.asanyarray(array), allow_pickle=False)
    return buf.getvalue()


def encode_npz(arrays: Mapping[str, NDArray[np.generic]], *, compress: bool = False) -> bytes:
    """An ``.npz`` as ``np.savez`` / ``np.savez_compressed`` write it, with fixed timestamps.

    numpy stamps members with the current time; a fixed stamp makes the
    same arrays give the same bytes, which the data generator's digests need.
    """
    buf = io.BytesIO()
    method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with zipfile.ZipFile(buf, "w", compression=method) as zf:
        for key, arr in arrays.items():
            info = zipfile.ZipInfo(f"{key}.npy", date_time=_ZIP_EPOCH)
            info.compress_type = method
            info.external_attr = 0o600 << 16
            zf.writestr(info, encode_npy(arr))
    return buf.getvalue()
