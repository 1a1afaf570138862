"""Local Arrow files on network and FUSE mounts: no page read through the map unfilled.

A local Arrow file is memory-mapped and pyarrow reads it through the map: the
message headers while the file opens, a column's validity bitmap or
dictionary when its views are made, the rows' values at the gather. A page
the storage fails to read (an NFS soft mount timing out, a FUSE driver whose
backend fails) is then SIGBUS, which kills the process without a word. On a
network or FUSE mount each of those pages is first faulted in with
``MADV_POPULATE_READ``, which answers an error instead
(:class:`~headrace.errors.StorageError` naming the file and bytes): the header
walk here (:func:`populate_headers`), the buffers a view reads at once here
(:func:`populate_buffers`), the gather's pages by the map fill
(:mod:`headrace.formats._map_fill`, kept on there). On a local disk none of
this is done: it costs system calls on the fast path for an error a local
disk rarely gives (docs/io.md#errors-and-lifetimes).
"""

from __future__ import annotations

import ctypes
import os
import struct
from collections.abc import Iterable
from typing import Any

from headrace.formats._arrow_format import _Corrupt, _Flat
from headrace.formats._map_fill import MappedFile
from headrace.io import PAGE
from headrace.io._buffers import populate_file
from headrace.io._file import read_error

__all__ = [
    "eager_buffers",
    "populate_buffers",
    "populate_headers",
    "populate_message",
    "read_ends",
    "struct_buffers",
]

_MAGIC = b"ARROW1"


def _populate(f: MappedFile, lo: int, hi: int) -> None:
    """Fault in file bytes ``[lo, hi)`` of ``f``'s map (whole pages)."""
    a = lo // PAGE * PAGE
    b = min(-(-hi // PAGE) * PAGE, -(-f.size // PAGE) * PAGE)
    if b <= a:
        return
    # Without the advice (before 5.14) the access faults them in, as before.
    populate_file(f.map_address + a, b - a, f.path, lo, min(hi, f.size), f.check_size)


def _bytes(f: MappedFile, lo: int, n: int) -> bytes:
    _populate(f, lo, lo + n)
    return ctypes.string_at(f.map_address + lo, n)


def read_ends(f: MappedFile, fd: int) -> tuple[int, int] | None:
    """Read what an open reads at the ends of the Arrow IPC stream or file mapped at
    ``f.map_address`` (its magic, a file's footer, a stream's end marker) by ``pread``
    on the map's own descriptor, so that pyarrow's reads of them through the map find
    their pages in memory. The stretch of the file its messages lie in, ``(start,
    end)``; None if the bytes do not parse (left for pyarrow to name: its open follows).

    Read, not populated: a ``MADV_POPULATE_READ`` of a FUSE file's last page made the
    kernel drop every ``MADV_WILLNEED`` after it (the header read-ahead of
    :mod:`headrace.formats._arrow_local`: an IPC file's open went from 0.2 to 5.3 s at
    20 ms a READ). The map's descriptor, not a new one: a FUSE open may drop the
    file's cached pages.
    """
    size = f.size

    def pread(lo: int, n: int) -> bytes:
        try:
            return os.pread(fd, n, lo)
        except OSError as exc:
            raise read_error(f.path, "read", lo, n, 0, exc) from exc

    if size < 8:
        return None
    if pread(0, 6) == _MAGIC:
        if size < 18:
            return None
        tail = pread(size - 10, 10)
        footer = struct.unpack_from("<i", tail)[0]
        if tail[4:] != _MAGIC or not 0 < footer <= size - 18:
            return None
        pread(size - 10 - footer, footer)
        return 8, size - 10 - footer
    pread(size - 8, 8)  # the end-of-stream marker, checked at open
    return 0, size


def populate_message(f: MappedFile, at: int, end: int) -> int | None:
    """Fault in the prefix and header of the IPC message at byte ``at`` (its body is
    not read); where the next message starts, or None at the end marker or where the
    bytes do not parse (left for pyarrow to name)."""
    try:
        if at + 4 > end:
            return None
        first = struct.unpack_from("<i", _bytes(f, at, 4))[0]
        pre = 8 if first == -1 else 4
        if pre == 8:
            if at + 8 > end:
                return None
            length = struct.unpack_from("<i", _bytes(f, at + 4, 4))[0]
        else:
            length = first
        if length <= 0 or at + pre + length > end:
            return None  # the end marker (0), or bytes pyarrow will refuse by name
        meta = _Flat(_bytes(f, at + pre, length))
        body = meta.scalar(meta.root(), 3, "<q")
    except _Corrupt:
        return None
    return at + pre + length + body if body >= 0 else None


def populate_headers(f: MappedFile, ends: tuple[int, int]) -> None:
    """Fault in every message header of the Arrow IPC stream or file mapped at
    ``f.map_address`` whose messages lie in ``ends`` (from :func:`read_ends`), walking
    them as pyarrow will, before pyarrow does, one after another. Bodies are not read.
    For the files pyarrow's own reader opens (dictionaries, no footer index, Arrow <
    0.15); the others' headers are faulted in by headrace's walk
    (:mod:`headrace.formats._arrow_local`), many at once."""
    at: int | None = ends[0]
    while at is not None:
        at = populate_message(f, at, ends[1])


def eager_buffers(pa: Any, arr: Any) -> list[Any]:
    """The buffers of ``arr`` that making its views reads at once: validity bitmaps
    (of the array and of its list items) where the header counts nulls, and every
    buffer of a dictionary-encoded array (decoded whole)."""
    if pa.types.is_dictionary(arr.type):
        return [b for b in (*arr.indices.buffers(), *arr.dictionary.buffers()) if b is not None]
    out = []
    if arr.null_count:
        out.append(arr.buffers()[0])
    values = getattr(arr, "values", None)
    if values is not None and values.null_count:
        out.append(values.buffers()[0])
    return [b for b in out if b is not None]


def struct_buffers(pa: Any, arr: Any, field: tuple[str, ...]) -> list[Any]:
    """:func:`eager_buffers` of ``arr`` and of each struct field on the way down
    ``field`` (their validity bitmaps are all read to find a field's null rows)."""
    out = []
    for name in field:
        out.extend(eager_buffers(pa, arr))
        if not pa.types.is_struct(arr.type):  # a list of structs: its items' structs
            arr = arr.values
            out.extend(eager_buffers(pa, arr))
        arr = arr.field(arr.type.get_field_index(name))
    out.extend(eager_buffers(pa, arr))
    return out


def populate_buffers(f: MappedFile, buffers: Iterable[Any]) -> None:
    """Fault in the pages of the Arrow ``buffers`` that lie in ``f``'s map."""
    lo, hi = f.map_address, f.map_address + f.size
    for b in buffers:
        if b.size and lo <= b.address and b.address + b.size <= hi:
            _populate(f, b.address - lo, b.address - lo + b.size)
