"""Places in an Arrow IPC file or stream's bytes, for tests that damage one field of a
message header: each message's byte and type, and the flatbuffer fields (tables reached
through their vtables) of a record batch's buffer list."""

from __future__ import annotations

import struct

import pyarrow as pa
import pyarrow.ipc as ipc


def messages(raw: bytes) -> list[tuple[int, str]]:
    """(byte, type) of each message of the IPC stream ``raw``."""
    reader = pa.BufferReader(pa.py_buffer(raw))
    out: list[tuple[int, str]] = []
    while True:
        at = reader.tell()
        try:
            message = ipc.read_message(reader)
        except EOFError:  # the end-of-stream marker
            return out
        out.append((at, message.type))


def u32(raw: bytes | bytearray, at: int) -> int:
    return int(struct.unpack_from("<I", raw, at)[0])


def slot(raw: bytes | bytearray, table: int, k: int) -> int:
    """Where the vtable of the flatbuffer table at byte ``table`` keeps field ``k``'s
    place (an uint16 from the table; 0: absent)."""
    vtable = table - int(struct.unpack_from("<i", raw, table)[0])
    assert 4 + 2 * k + 2 <= struct.unpack_from("<H", raw, vtable)[0]
    return vtable + 4 + 2 * k


def field(raw: bytes | bytearray, table: int, k: int) -> int:
    """Where field ``k`` of the flatbuffer table at byte ``table`` lies."""
    off = int(struct.unpack_from("<H", raw, slot(raw, table, k))[0])
    assert off, f"field {k} is absent"
    return table + off


def message(raw: bytes | bytearray, at: int) -> int:
    """The Message table of the message at byte ``at`` (past the continuation marker and
    the header's length)."""
    return at + 8 + u32(raw, at + 8)


def buffer_entry(raw: bytes | bytearray, at: int, k: int) -> int:
    """Where the ``k``-th Buffer (offset, length: two int64) of the record batch message at
    byte ``at`` lies: Message.header (field 2), then RecordBatch.buffers (field 2)."""
    where = field(raw, message(raw, at), 2)
    header = where + u32(raw, where)
    where = field(raw, header, 2)
    vector = where + u32(raw, where)
    assert k < u32(raw, vector)
    return vector + 4 + 16 * k
