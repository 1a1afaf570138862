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
import errno
import functools
import os
import struct
from collections.abc import Iterable
from typing import Any

from headrace.formats._arrow_remote import _Corrupt, _Flat
from headrace.formats._map_fill import MappedFile
from headrace.io import PAGE
from headrace.io._buffers import populate_failed, populate_read
from headrace.io._mounts import is_network_fs

__all__ = ["eager_buffers", "on_network", "populate_buffers", "populate_headers"]

_MAGIC = b"ARROW1"


def on_network(path: str) -> bool:
    """Whether the file ``path`` lies on a network or FUSE mount, asked once per folder:
    ``/proc/mounts`` is parsed each time (70 us with 20 mounts here, more on a node with
    hundreds), and a table may have thousands of shards in a few folders."""
    return _network_dir(os.path.dirname(os.path.abspath(path)))


@functools.lru_cache(maxsize=256)
def _network_dir(folder: str) -> bool:
    return is_network_fs(folder)


def _populate(f: MappedFile, lo: int, hi: int) -> None:
    """Fault in file bytes ``[lo, hi)`` of ``f``'s map (whole pages)."""
    a = lo // PAGE * PAGE
    b = min(-(-hi // PAGE) * PAGE, -(-f.size // PAGE) * PAGE)
    if b <= a:
        return
    try:
        populate_read(f.map_address + a, b - a)
    except OSError as exc:
        if exc.errno in (errno.EINVAL, errno.ENOSYS, errno.EINTR, errno.EAGAIN):
            return  # no advice here (before 5.14), or interrupted: the access faults them
        raise populate_failed(f.path, lo, min(hi, f.size), exc, f.check_size) from exc


def _bytes(f: MappedFile, lo: int, n: int) -> bytes:
    _populate(f, lo, lo + n)
    return ctypes.string_at(f.map_address + lo, n)


def populate_headers(f: MappedFile) -> None:
    """Fault in every message header of the Arrow IPC stream or file mapped at
    ``f.map_address`` (and a file's footer, and a stream's end marker), walking
    them as pyarrow will, before pyarrow does. Bodies are not read.

    Bytes that do not parse are left for pyarrow to name (its open follows).
    """
    size = f.size
    if size < 8:
        return
    start, end = 0, size
    if _bytes(f, 0, 6) == _MAGIC:
        if size < 18:
            return
        tail = _bytes(f, size - 10, 10)
        footer = struct.unpack_from("<i", tail)[0]
        if tail[4:] != _MAGIC or not 0 < footer <= size - 18:
            return
        _populate(f, size - 10 - footer, size)
        start, end = 8, size - 10 - footer
    else:
        _populate(f, max(0, size - 8), size)  # the end-of-stream marker, checked at open
    at = start
    try:
        while at + 4 <= end:
            first = struct.unpack_from("<i", _bytes(f, at, 4))[0]
            pre = 8 if first == -1 else 4
            if pre == 8:
                if at + 8 > end:
                    return
                length = struct.unpack_from("<i", _bytes(f, at + 4, 4))[0]
            else:
                length = first
            if length <= 0 or at + pre + length > end:
                return  # the end marker (0), or bytes pyarrow will refuse by name
            meta = _Flat(_bytes(f, at + pre, length))
            body = meta.scalar(meta.root(), 3, "<q")
            if body < 0:
                return
            at += pre + length + body
    except _Corrupt:
        return


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


def populate_buffers(f: MappedFile, buffers: Iterable[Any]) -> None:
    """Fault in the pages of the Arrow ``buffers`` that lie in ``f``'s map."""
    lo, hi = f.map_address, f.map_address + f.size
    for b in buffers:
        if b.size and lo <= b.address and b.address + b.size <= hi:
            _populate(f, b.address - lo, b.address - lo + b.size)
