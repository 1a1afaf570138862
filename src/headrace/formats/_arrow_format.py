"""Just enough of the Arrow IPC format to walk its messages without pyarrow's reader.

A bounds-checked reader of flatbuffer message headers (:class:`_Flat`), the
message types, and how many field nodes and buffers a column of a type has in
a record batch body (Arrow's columnar format), shared by the walks of local
streams (:mod:`~headrace.formats._arrow_local`) and of objects
(:mod:`~headrace.formats._arrow_remote`), the sub-window reads
(:mod:`~headrace.formats._arrow_slice`), the map guard and packed token columns.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
from numpy.typing import NDArray

from headrace._messages import RECOPY
from headrace.errors import FormatError

__all__ = [
    "check_end",
    "validate_as_bytes",
    "_Corrupt",
    "_DICTIONARY",
    "_Flat",
    "_MAGIC",
    "_RECORD_BATCH",
    "_SCHEMA",
    "_buffer_counts",
    "_has_dictionary",
    "_indexed",
    "_node_counts",
]

_MAGIC = b"ARROW1"
# Message header types (Arrow's Message.fbs).
_SCHEMA, _DICTIONARY, _RECORD_BATCH = 1, 2, 3


class _Corrupt(Exception):
    """A header that is not what the Arrow format says (caught and named by the walk)."""


class _Flat:
    """Just enough of the flatbuffer format to read a message header, bounds-checked."""

    __slots__ = ("buf",)

    def __init__(self, buf: bytes) -> None:
        self.buf = buf

    def _get(self, fmt: str, pos: int) -> int:
        if pos < 0 or pos + struct.calcsize(fmt) > len(self.buf):
            raise _Corrupt(f"a field at byte {pos} lies outside the {len(self.buf)}-byte header")
        value: int = struct.unpack_from(fmt, self.buf, pos)[0]
        return value

    def int64(self, pos: int) -> int:
        return self._get("<q", pos)

    def root(self) -> int:
        return self._get("<I", 0)

    def field(self, table: int, slot: int) -> int | None:
        """Where field ``slot`` of the table at ``table`` is, ``None`` when absent."""
        vtable = table - self._get("<i", table)
        size = self._get("<H", vtable)
        at = 4 + 2 * slot
        if at + 2 > size:
            return None
        off = self._get("<H", vtable + at)
        return table + off if off else None

    def scalar(self, table: int, slot: int, fmt: str, default: int = 0) -> int:
        pos = self.field(table, slot)
        return default if pos is None else self._get(fmt, pos)

    def table(self, table: int, slot: int) -> int | None:
        pos = self.field(table, slot)
        return None if pos is None else pos + self._get("<I", pos)

    def structs(self, table: int, slot: int) -> NDArray[np.int64]:
        """A vector field of 16-byte structs of two int64 (field nodes, buffers) as an
        ``(n, 2)`` array (empty when absent)."""
        first, count = self.vector(table, slot)
        if count and (first < 0 or first + 16 * count > len(self.buf)):
            raise _Corrupt(
                f"{count} entries at byte {first} overrun the {len(self.buf)}-byte header"
            )
        return np.frombuffer(self.buf, "<i8", 2 * count, first if count else 0).reshape(count, 2)

    def vector(self, table: int, slot: int) -> tuple[int, int]:
        """``(first element's position, length)`` of a vector field (``(0, 0)`` when absent)."""
        pos = self.field(table, slot)
        if pos is None:
            return 0, 0
        vec = pos + self._get("<I", pos)
        return vec + 4, self._get("<I", vec)


def _has_dictionary(pa: Any, typ: Any) -> bool:
    """Whether ``typ`` or a type nested in it is dictionary-encoded."""
    if pa.types.is_dictionary(typ):
        return True
    return any(_has_dictionary(pa, typ.field(i).type) for i in range(typ.num_fields))


def _indexed(pa: Any, typ: Any) -> Any:
    """``typ`` with each dictionary in it (at the top or in a struct) as its index type,
    whose layout a record batch holds; ``None`` where a dictionary lies elsewhere (in
    a list or a map). A record batch decoded so needs none of the dictionary batches:
    the columns left out of a read may be dictionary-encoded."""
    if pa.types.is_dictionary(typ):
        return typ.index_type
    if pa.types.is_struct(typ):
        kids = [(f, _indexed(pa, f.type)) for f in typ]
        if any(k is None for _, k in kids):
            return None
        return pa.struct([f.with_type(k) for f, k in kids])
    return None if _has_dictionary(pa, typ) else typ


def validate_as_bytes(pa: Any, arr: Any) -> None:
    """``arr.validate(full=True)``: offsets, lengths and indices of bytes from the
    network checked, its text as bytes. headrace hands strings over as their bytes, and
    pyarrow's read of a local file checks no UTF-8: a remote read refused what the
    local copy read (until 2026-12-06)."""
    typ = _as_bytes(pa, arr.type)
    (arr if typ == arr.type else arr.view(typ)).validate(full=True)


def _as_bytes(pa: Any, typ: Any) -> Any:
    """``typ`` with each string type as the binary type of its layout."""
    t = pa.types
    if t.is_string(typ):
        return pa.binary()
    if t.is_large_string(typ):
        return pa.large_binary()
    if str(typ) == "string_view":
        return pa.binary_view()
    if t.is_struct(typ):
        return pa.struct([f.with_type(_as_bytes(pa, f.type)) for f in typ])
    if t.is_dictionary(typ):
        return pa.dictionary(typ.index_type, _as_bytes(pa, typ.value_type), typ.ordered)
    if t.is_list(typ) or t.is_large_list(typ) or t.is_fixed_size_list(typ):
        item = typ.value_field.with_type(_as_bytes(pa, typ.value_type))
        if t.is_fixed_size_list(typ):
            return pa.list_(item, typ.list_size)
        return pa.large_list(item) if t.is_large_list(typ) else pa.list_(item)
    return typ


def _node_counts(pa: Any, typ: Any) -> int:
    """Field nodes a column of ``typ`` has in a record batch (itself, then its children's).
    An extension type's are its storage's: a canonical one's too (``fixed_shape_tensor``
    is no ``pa.ExtensionType``, whose subclasses are Python's), which counted one, so
    the columns after it took its children's nodes (their null counts, until 2026-12-07)."""
    if isinstance(typ, pa.BaseExtensionType):
        typ = typ.storage_type
    return 1 + sum(_node_counts(pa, typ.field(i).type) for i in range(typ.num_fields))


def _buffer_counts(pa: Any, typ: Any) -> int | None:
    """Buffers a column of ``typ`` has in a record batch body (its own, then its
    children's), as Arrow's columnar format lists them; ``None`` for layouts not
    listed here (unions, string views, run-end encoded), whose columns are then not fetched
    apart from the others."""
    t = pa.types
    if isinstance(typ, pa.ExtensionType):
        typ = typ.storage_type
    if t.is_null(typ):
        return 0
    if t.is_dictionary(typ):
        return 2  # validity, indices (the values come in dictionary batches)
    if t.is_string(typ) or t.is_binary(typ) or t.is_large_string(typ) or t.is_large_binary(typ):
        return 3  # validity, offsets, data
    if t.is_list(typ) or t.is_large_list(typ) or t.is_map(typ):
        own = 2  # validity, offsets
    elif t.is_list_view(typ) or t.is_large_list_view(typ):
        own = 3  # validity, offsets, sizes
    elif t.is_fixed_size_list(typ) or t.is_struct(typ):
        own = 1  # validity
    elif typ.num_fields == 0 and (
        t.is_primitive(typ) or t.is_decimal(typ) or t.is_fixed_size_binary(typ)
    ):
        return 2  # validity, values (bits for bool)
    else:
        return None
    children = [_buffer_counts(pa, typ.field(i).type) for i in range(typ.num_fields)]
    if any(c is None for c in children):
        return None
    return own + sum(c for c in children if c is not None)


def check_end(url: str, size: int, at: int, stop: int) -> None:
    """Refuse a stream of ``size`` bytes whose messages end at byte ``at`` and its end
    marker (ff ff ff ff 00 00 00 00; 00 00 00 00 before Arrow 0.15) at ``stop``,
    unless that marker is there and ends the file: pyarrow reads a stream cut after
    a message as a shorter one, and stops at a marker that bytes follow."""
    if stop == at:
        raise FormatError(
            f"{url}: truncated Arrow IPC stream: it ends at byte {size} after a whole "
            "message, without the end-of-stream marker (ff ff ff ff 00 00 00 00, or "
            f"00 00 00 00 before Arrow 0.15): {RECOPY}"
        )
    if stop != size:
        raise FormatError(
            f"{url}: {size - stop} bytes follow the end-of-stream marker at byte {at} "
            f"({size} bytes): streams written one after another into one file, or bytes "
            "appended, which a stream reader never reads; write one stream to a file"
        )
