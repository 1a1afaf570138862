"""Arrow arrays as NumPy arrays, read from their buffers: what pyarrow's ``to_numpy``
gives, without its pandas conversion. Its first call imports pandas where it is
installed: ~0.15 s and ~40 MB of a table's first batch (2c, 2026-12-03), about all of
it. Numbers are views of the buffer; booleans and validity bitmaps (bit-packed, least
significant bit first) are unpacked into one byte per row."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "bits",
    "booleans",
    "list_views",
    "lists",
    "null_rows",
    "numbers",
    "one_batch",
    "temporal_dtype",
    "valid_rows",
    "zero_filled",
]

# Arrow's names of the number types (``str(type)``), as NumPy's.
_DTYPES: dict[str, np.dtype[Any]] = {
    str(t): np.dtype(t)
    for t in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
} | {"halffloat": np.dtype("f2"), "float": np.dtype("f4"), "double": np.dtype("f8")}


def temporal_dtype(typ: Any) -> np.dtype[Any] | None:
    """NumPy's type of Arrow timestamps, dates, durations and times of day
    (``datetime64`` / ``timedelta64`` of the column's unit; a timestamp's time zone is
    not kept, its values are UTC as stored, as pyarrow's ``to_numpy`` gives them; a time
    of day is the time since midnight, which NumPy has no other type for), else ``None``."""
    name = str(typ)
    if name.startswith("timestamp["):
        return np.dtype(f"M8[{typ.unit}]")
    if name.startswith(("duration[", "time32[", "time64[")):
        return np.dtype(f"m8[{typ.unit}]")
    return {"date32[day]": np.dtype("M8[D]"), "date64[ms]": np.dtype("M8[ms]")}.get(name)


def bits(buf: Any, offset: int, n: int) -> NDArray[np.bool_]:
    """Bits ``[offset, offset + n)`` of the Arrow bitmap ``buf`` (an array's offset
    counts bits: a slice starts mid-byte), one ``bool`` each."""
    if n == 0:
        return np.zeros(0, dtype=bool)
    first, skip = divmod(offset, 8)
    raw = np.frombuffer(buf, dtype=np.uint8, count=(skip + n + 7) // 8, offset=first)
    out: NDArray[np.bool_] = np.unpackbits(raw, count=skip + n, bitorder="little")[skip:].view(
        np.bool_
    )
    return out


def valid_rows(arr: Any) -> NDArray[np.bool_]:
    """``arr.is_valid().to_numpy()``: which of ``arr``'s rows are not null (a
    dictionary's too where its index points at a null value, which its null count
    leaves out)."""
    if not null_rows(arr):
        return np.ones(len(arr), dtype=bool)
    # is_valid(), not the validity buffer: the arrays without one (null-typed, unions)
    # state their nulls otherwise; the bitmap it builds has no nulls of its own.
    return booleans(arr.is_valid())


def null_rows(arr: Any) -> bool:
    """Whether ``arr`` has null rows: its null count, or a dictionary's null values (an
    index pointing at one is valid, so not counted)."""
    return bool(arr.null_count or getattr(getattr(arr, "dictionary", None), "null_count", 0))


def booleans(arr: Any) -> NDArray[np.bool_]:
    """A boolean array's values unpacked (a copy, as ``to_numpy``'s); a null row's
    value is what its bit holds."""
    data = arr.buffers()[1]
    return np.zeros(0, dtype=bool) if data is None else bits(data, arr.offset, len(arr))


def numbers(arr: Any, *, zero_copy_only: bool = False) -> NDArray[Any]:
    """``arr.to_numpy()`` for integers, floats and booleans without nulls: numbers a
    read-only view of the buffer, booleans unpacked (a copy, as ``to_numpy``'s). Other
    types, arrays with nulls, and booleans where no copy is allowed still take
    ``to_numpy``."""
    out = None if arr.null_count or (zero_copy_only and _is_bool(arr)) else _values(arr)
    return np.asarray(arr.to_numpy(zero_copy_only=zero_copy_only)) if out is None else out


def zero_filled(arr: Any) -> NDArray[Any]:
    """``arr.fill_null(0).to_numpy()`` (``False`` for booleans): the places of null rows
    hold zeros. ``fill_null`` itself imports pandas (its ``pa.scalar``); this unpacks
    the validity bitmap and zeroes those places in a copy of the values."""
    out = _values(arr)
    if out is None:
        return numbers(arr.fill_null(False if _is_bool(arr) else 0))
    if not arr.null_count:
        return out
    out = out.copy()  # a view of the file's buffer otherwise
    out[~valid_rows(arr)] = 0
    return out


def _is_bool(arr: Any) -> bool:
    return str(arr.type) == "bool"


def _values(arr: Any) -> NDArray[Any] | None:
    """The values of number or boolean array ``arr``, whatever its nulls (their places
    hold what the file holds there): a read-only view of the buffer, booleans unpacked;
    ``None`` for other types."""
    if _is_bool(arr):
        return booleans(arr)
    dtype = _DTYPES.get(str(arr.type)) or temporal_dtype(arr.type)
    if dtype is None:
        return None
    if str(arr.type).startswith(("date32", "time32")):  # int32: NumPy's counts are 64-bit
        return _values_as(arr, np.dtype("<i4")).astype(dtype)
    return _values_as(arr, dtype)


def _values_as(arr: Any, dtype: np.dtype[Any]) -> NDArray[Any]:
    data = arr.buffers()[1]
    if data is None:  # an empty array may have no buffer
        return np.empty(0, dtype=dtype)
    out = np.frombuffer(data, dtype=dtype, count=len(arr), offset=arr.offset * dtype.itemsize)
    out.flags.writeable = False
    return out


def one_batch(pa: Any, table: Any) -> Any:
    """``table`` (a decoded row group) as one record batch. A column of more than 2 GiB
    of strings or bytes (a row group of large images) is not one array of 32-bit
    offsets: ``combine_chunks`` keeps it in pieces, and until 2026-12-07 the first
    piece's rows alone were read, the others lost without a word. Such a table is cast
    to the 64-bit forms (``large_string``, ``large_binary``, ``large_list``), which
    every reader of a column takes, and combined then."""
    batches = table.combine_chunks().to_batches()
    if len(batches) == 1:
        return batches[0]
    wide = pa.schema([f.with_type(_wide(pa, f.type)) for f in table.schema])
    return table.cast(wide).combine_chunks().to_batches()[0]


def _wide(pa: Any, typ: Any) -> Any:
    """``typ`` with 64-bit offsets wherever it has 32-bit ones."""
    t = pa.types
    if t.is_string(typ):
        return pa.large_string()
    if t.is_binary(typ):
        return pa.large_binary()
    if t.is_list(typ) or t.is_large_list(typ):
        return pa.large_list(typ.value_field.with_type(_wide(pa, typ.value_type)))
    if t.is_fixed_size_list(typ):
        return pa.list_(typ.value_field.with_type(_wide(pa, typ.value_type)), typ.list_size)
    if t.is_struct(typ):
        return pa.struct([f.with_type(_wide(pa, f.type)) for f in typ])
    return typ


def list_views(pa: Any, typ: Any) -> Any:
    """``typ`` with each list view in it (``list_view``, ``large_list_view``: Arrow 14's
    lists, each row an offset and a size into the values) as a list of the same offset
    width: the type :func:`lists` reads its arrays as. ``typ`` itself where it has none."""
    t = pa.types
    if t.is_list_view(typ) or t.is_large_list_view(typ):
        field = typ.value_field.with_type(list_views(pa, typ.value_type))
        return pa.large_list(field) if t.is_large_list_view(typ) else pa.list_(field)
    if t.is_list(typ) or t.is_large_list(typ) or t.is_fixed_size_list(typ):
        value = typ.value_type  # (a new object at each ask)
        inner = list_views(pa, value)
        if inner is value:
            return typ
        field = typ.value_field.with_type(inner)
        if t.is_fixed_size_list(typ):
            return pa.list_(field, typ.list_size)
        return pa.large_list(field) if t.is_large_list(typ) else pa.list_(field)
    return typ


def lists(pa: Any, arr: Any) -> Any:
    """``arr`` with each list view in it as a list (:func:`list_views`): each row's values
    copied in row order. A list view's rows may lie anywhere in its values, out of order
    or overlapping; pyarrow 26's cast of such a one to a list builds an invalid array (or
    the wrong rows), so the rows are gathered here by ``flatten``. ``arr`` itself (no
    copy) where it holds no list view."""
    typ = list_views(pa, arr.type)
    if typ is arr.type:
        return arr
    t = pa.types
    mask = arr.is_null() if arr.null_count else None
    if t.is_fixed_size_list(arr.type):
        k = arr.type.list_size
        values = lists(pa, arr.values.slice(arr.offset * k, len(arr) * k))
        return pa.FixedSizeListArray.from_arrays(values, type=typ, mask=mask)
    if t.is_list_view(arr.type) or t.is_large_list_view(arr.type):
        lengths = zero_filled(arr.value_lengths()).astype(np.int64)  # (null rows: null)
        first, values = 0, arr.flatten()  # each valid row's values, in row order
    else:  # a list of list views
        raw = numbers(arr.offsets).astype(np.int64)
        lengths, first = np.diff(raw), int(raw[0])
        values = arr.values.slice(first, int(raw[-1]) - first)
    offsets = np.zeros(len(arr) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    large = t.is_large_list(typ)
    kind = pa.LargeListArray if large else pa.ListArray
    width = pa.int64() if large else pa.int32()
    return kind.from_arrays(pa.array(offsets, width), lists(pa, values), type=typ, mask=mask)
