"""NPY: zero-copy decoding with a validated header, and deterministic writing.

Sample schema
-------------
* ``.npy``: one array with the header's dtype and shape (Fortran order kept).
  A file holding ``samples_per_file > 1`` samples stores them on a leading
  axis: shape ``(samples_per_file, *sample_shape)``.

``decode_npy`` returns a view of the caller's buffer: no byte is copied. NPZ
archives of NPY members: :mod:`headrace.formats._npz`.
"""

from __future__ import annotations

import ast
import io
import math
import re
import struct
import threading
from collections.abc import Callable
from functools import lru_cache

import numpy as np
from numpy.typing import NDArray

from headrace._messages import RECOPY, count_fix
from headrace.errors import DataError, FormatError, UnsupportedFormError
from headrace.formats._buffer import Buffer, as_bytes_view

__all__ = [
    "NPY_HEAD",
    "check_rows",
    "decode_npy",
    "decode_npy_rows",
    "encode_npy",
    "npy_header",
    "npy_rows",
    "refuse_npy_as_raw",
]

_NPY_MAGIC = b"\x93NUMPY"


#: The bytes of an NPY header as NumPy writes it for most arrays (a multiple of 64).
NPY_HEAD = 128


# A Python 2 long in a header's shape: ``(3L, 4L)``.
_PY2_LONG = re.compile(r"\b(\d+)L\b")


_EVAL_LOCK = threading.Lock()


#: The most bytes an array may claim: what a file's size (an off_t) can hold.
_MAX_BYTES = 2**63 - 1


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


#: What a file that is not NPY is, by its first bytes, and how to read it instead.
_OTHER_FORMATS = (
    (b"PK\x03\x04", "an NPZ (a zip archive, as np.savez writes): name it .npz, format='npz'"),
    (b"PK\x05\x06", "an empty zip archive (an NPZ of no arrays)"),
    (b"\x89HDF\r\n\x1a\n", "an HDF5 file: name it .h5, format='hdf5' with datasets=(...)"),
    (b"\x89PNG\r\n\x1a\n", "a PNG image: name it .png, format='png'"),
    (b"\xff\xd8\xff", "a JPEG image: name it .jpg, format='jpeg'"),
    (b"\x80", "a Python pickle (pickle.dump, torch.save): headrace never unpickles; save "
     "arrays with np.save"),
)  # fmt: skip


def _what_it_is(head: bytes) -> str:
    """``"; it is ..."``: what a file that is not NPY looks like (``""``: not known)."""
    for magic, what in _OTHER_FORMATS:
        if head.startswith(magic):
            return f"; it is {what}"
    return ""


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
            + _what_it_is(bytes(view[:8]))
        )
    if len(view) < 10:
        raise FormatError(
            f"{where}: truncated: {len(view)} bytes, shorter than an NPY header: {RECOPY}"
        )
    major = view[6]
    if major == 1:
        (hlen,) = struct.unpack_from("<H", view, 8)
        start = 10
    elif major in (2, 3):
        if len(view) < 12:
            raise FormatError(
                f"{where}: truncated: {len(view)} bytes, shorter than an NPY header: {RECOPY}"
            )
        (hlen,) = struct.unpack_from("<I", view, 8)
        start = 12
    else:
        raise FormatError(
            f"{where}: unsupported NPY version {major}.{view[7]} (expected 1.0, 2.0 or 3.0, "
            "the versions numpy.save writes): a damaged header, or another writer's; save "
            f"the array again with numpy.save, or {RECOPY}"
        )
    end = start + hlen
    if end > len(view):
        raise FormatError(
            f"{where}: truncated: header says {hlen} header bytes, found {len(view) - start}: "
            f"{RECOPY}"
        )
    try:
        text = bytes(view[start:end]).decode("utf-8" if major == 3 else "latin1")
        header = _literal(text, major)
    except (UnicodeDecodeError, ValueError, SyntaxError, MemoryError, RecursionError) as exc:
        raise FormatError(f"{where}: corrupt NPY header ({exc}): {RECOPY}") from exc
    if not isinstance(header, dict) or set(header) != {"descr", "fortran_order", "shape"}:
        raise FormatError(
            f"{where}: corrupt NPY header: expected a dict with keys descr, fortran_order, "
            f"shape; found {text.strip()[:120]!r}: {RECOPY}"
        )
    shape = header["shape"]
    if not isinstance(shape, tuple) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
    ):
        raise FormatError(f"{where}: corrupt NPY header: bad shape {shape!r}: {RECOPY}")
    if not isinstance(header["fortran_order"], bool):
        raise FormatError(
            f"{where}: corrupt NPY header: bad fortran_order {header['fortran_order']!r}: {RECOPY}"
        )
    try:
        dtype = np.lib.format.descr_to_dtype(header["descr"])
    except (TypeError, ValueError) as exc:
        raise FormatError(
            f"{where}: corrupt NPY header: bad descr {header['descr']!r}: {RECOPY}"
        ) from exc
    if dtype.hasobject:
        # Object arrays are pickles: arbitrary code on load, and never zero-copy. Not
        # damage: on_corrupt="replace" raises it (every such file was replaced, silently).
        raise UnsupportedFormError(
            f"{where}: NPY holds Python objects (dtype {dtype}); refusing to unpickle "
            "(allow_pickle stays off: loading a pickle runs code). Save it with a numeric "
            "or fixed-width string dtype (ragged samples: pad them, or one array per sample)"
            + (f", or {leave_out}" if leave_out else "")
        )
    fortran = header["fortran_order"]
    if dtype.subdtype is not None:
        # Another writer's descr of a subarray, ('<i4', (2,)) (numpy.save folds it into
        # the shape): items of that shape, trailing axes as np.empty(shape, dtype) puts
        # them. In Fortran order they would be C-order runs inside a Fortran-order array.
        if fortran and len(shape) > 1:
            raise FormatError(
                f"{where}: a Fortran-order array of shape {shape} of subarray dtype {dtype} "
                f"(items of shape {dtype.shape}): not a layout NumPy reads; save the array "
                f"again with numpy.save (shape {shape + dtype.shape})"
            )
        shape, dtype, fortran = shape + dtype.shape, dtype.base, False
    if math.prod(d for d in shape if d) * max(dtype.itemsize, 1) > _MAX_BYTES:
        # A forged length: NumPy cannot size such an array (OverflowError downstream,
        # where the counts are summed), and no file holds it. Its zero dimensions are left
        # out, as NumPy does: (0, 2**62) of float64 holds no byte, yet NumPy refuses it.
        raise FormatError(
            f"{where}: corrupt NPY header: shape {shape!r} of {dtype}: its dimensions (zeros "
            "left out) times the item size pass 2**63 - 1 bytes, which NumPy cannot size and "
            f"no file holds: {RECOPY}"
        )
    return dtype, shape, fortran, end


def _check_size(
    where: str, dtype: np.dtype[np.generic], shape: tuple[int, ...], want: int, found: int
) -> None:
    """Refuse ``found`` payload bytes where the header says ``want``."""
    if found != want:
        what = "truncated" if found < want else "corrupt"
        raise FormatError(
            f"{where}: {what}: header says {want} data bytes ({dtype}, shape {shape}), "
            f"found {found}: {RECOPY}"
        )


def _npy_from_view(view: memoryview, where: str, leave_out: str = "") -> NDArray[np.generic]:
    dtype, shape, fortran, offset = _parse_npy_header(view, where, leave_out)
    count = math.prod(shape)
    _check_size(where, dtype, shape, count * dtype.itemsize, len(view) - offset)
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


def check_rows(
    shape: tuple[int, ...],
    rows: NDArray[np.int64],
    count: tuple[int, str] | None,
    name: str,
    key: str,
    first: str | None = None,
) -> None:
    """The leading axis must hold ``count[0]`` samples (as ``count[1]`` says), and
    ``rows`` must lie on it; ``first``: the member of the file read before ``key`` that
    held them (then ``key``'s other length is the members', not the count's)."""
    if count is not None and (not shape or shape[0] != count[0]):
        fix = count_fix(count[1])
        if first is not None:
            fix = (
                f", as member {first!r} holds: each sample is one row of every member read; "
                "name members of one length in datasets=(...)"
            )
        raise DataError(
            f"{name}: {key!r} has shape {shape}; expected {count[0]} samples on its leading "
            f"axis ({count[1]}){fix}"
        )
    if not shape:
        raise DataError(f"{name}: {key!r} is a 0-d array (shape ()): it has no rows to read")
    if len(rows) and not 0 <= int(rows[0]) <= int(rows[-1]) < shape[0]:
        raise DataError(
            f"{name}: {key!r} has shape {shape}; rows {int(rows[0])} to {int(rows[-1])} "
            f"asked, expected rows in [0, {shape[0]})"
        )


def decode_npy_rows(
    data: Buffer,
    *,
    name: str,
    rows: NDArray[np.int64],
    count: tuple[int, str] | None = None,
    key: str = "data",
) -> NDArray[np.generic]:
    """Rows ``rows`` (increasing) of the NPY file in ``data``: a view where they are a run,
    else a copy of those rows. The header and the payload's size are checked as by
    :func:`decode_npy`; the leading axis must hold ``count[0]`` samples (a
    :class:`DataError` saying ``count[1]`` gives it). Only the rows asked are read, so
    ``data`` may hold only those (a file read by rows: ``_npy_ranges``)."""
    arr = decode_npy(data, name=name)
    check_rows(arr.shape, rows, count, name, key)
    r0, r1 = (int(rows[0]), int(rows[-1]) + 1) if len(rows) else (0, 0)
    return arr[r0:r1] if r1 - r0 == len(rows) else arr[rows]


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
            f"{where}: a 0-d array (shape ()): it has no leading axis to count samples on "
            "(samples_per_file='header'): save it with shape (1,) for one sample, or, where "
            "every file holds one sample, give samples_per_file=1"
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


def npy_rows(at: Callable[[int, int], memoryview], *, name: str, size: int | None = None) -> int:
    """The leading axis of an NPY file's array from its header alone (:func:`npy_header`);
    a 0-d array is a :class:`FormatError` naming ``name``, and so is a file whose
    ``size`` (where given) is not what its header says (truncated, as a truncated NPZ
    or HDF5 file is refused when counted, not when a batch first reaches it)."""
    dtype, shape, _, offset = npy_header(at, name)
    n = _rows(shape, name)
    if size is not None and dtype.itemsize:
        _check_size(name, dtype, shape, math.prod(shape) * dtype.itemsize, size - offset)
    return n


def encode_npy(array: NDArray[np.generic]) -> bytes:
    """The bytes of ``np.save(array)`` (format 1.0 when it fits), deterministic."""
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.asanyarray(array), allow_pickle=False)
    return buf.getvalue()
