"""The IPC header walk (tables on object storage) on damaged bytes: a FormatError or a
correct index, never another exception. The walk is fed from memory here (the object
store's part is tested in tests/integration/test_arrow_s3.py)."""

from __future__ import annotations

import random
from concurrent.futures import Future
from typing import Any

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")

from headrace.errors import FormatError  # noqa: E402
from headrace.formats._arrow_remote import _Walk  # noqa: E402


class _Bytes:
    """A RemoteFile stand-in over bytes in memory (fault injection: the bytes are damaged)."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def read_into(self, out: np.ndarray, offset: int) -> Future[None]:
        out[:] = np.frombuffer(self.data[offset : offset + out.size], np.uint8)
        done: Future[None] = Future()
        done.set_result(None)
        return done


def _ipc(file: bool, legacy: bool = False) -> tuple[bytes, pa.Table]:
    table = pa.table(
        {
            "ids": pa.array([[1, 2, 3]] * 300, pa.list_(pa.int32())),
            "n": np.arange(300),
            "s": pa.array([None if i % 7 == 0 else str(i) for i in range(300)]),
        }
    )
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(use_legacy_format=legacy)
    with (pa.ipc.new_file if file else pa.ipc.new_stream)(sink, table.schema, options=options) as w:
        w.write_table(table, max_chunksize=50)
    return bytes(sink.getvalue()), table


def _walk(data: bytes) -> Any:
    return _Walk("s3://b/t.arrow", _Bytes(data), len(data)).index(pa)


@pytest.mark.parametrize(
    ("file", "legacy"),
    [(False, False), (True, False), (False, True)],
    ids=["stream", "file", "stream-before-arrow-0.15"],
)
def test_the_walk_indexes_what_pyarrow_reads(file: bool, legacy: bool) -> None:
    data, table = _ipc(file, legacy)
    if legacy:  # messages without the continuation marker: the length comes first
        assert data[:4] != b"\xff\xff\xff\xff"
    index = _walk(data)
    assert index.rows == [50] * 6
    nulls = index.nulls
    assert nulls[:, 2].tolist() == [
        sum(1 for i in range(k, k + 50) if i % 7 == 0) for k in range(0, 300, 50)
    ]
    assert not nulls[:, :2].any()
    for (offset, length), rows in zip(index.spans, index.rows, strict=True):
        batch = pa.ipc.read_record_batch(pa.py_buffer(data[offset : offset + length]), table.schema)
        assert batch.num_rows == rows


@pytest.mark.parametrize("file", [False, True], ids=["stream", "file"])
def test_damaged_headers_are_format_errors_never_another_exception(file: bool) -> None:
    good, _ = _ipc(file)
    rng = random.Random(7)
    refused = 0
    for _ in range(400):
        data = bytearray(good)
        how = rng.randrange(3)
        if how == 0:
            for _ in range(rng.randrange(1, 5)):
                data[rng.randrange(len(data))] = rng.randrange(256)
        elif how == 1:
            data = data[: rng.randrange(len(data))]
        else:
            at = rng.randrange(len(data))
            data[at : at + 8] = bytes(rng.randrange(256) for _ in range(8))
        try:
            _walk(bytes(data))
        except FormatError as exc:
            assert str(exc).startswith("s3://b/t.arrow: ")
            refused += 1
    assert refused > 100  # most damage is caught here; a body's is caught when decoded


def _messages(data: bytes) -> list[bytes]:
    """A stream's messages (continuation, length, header, body), up to its end marker."""
    from headrace.formats._arrow_remote import _Flat

    out, at = [], 0
    while True:
        length = int.from_bytes(data[at + 4 : at + 8], "little", signed=True)
        if length == 0:
            return out
        body = _Flat(data[at + 8 : at + 8 + length]).scalar(_Flat(data[at + 8 :]).root(), 3, "<q")
        out.append(data[at : at + 8 + length + body])
        at += 8 + length + body


END = b"\xff\xff\xff\xff\x00\x00\x00\x00"


@pytest.mark.parametrize(
    ("damage", "match"),
    [
        (
            lambda m: m[0] + b"\xff\xff\xff\xff\x10\x00",  # a continuation, half a length
            r"truncated Arrow IPC stream at byte \d+$",
        ),
        (lambda m: END, r"an Arrow IPC stream without a schema message$"),
        (
            lambda m: m[0] + m[0] + b"".join(m[1:]) + END,
            r"corrupt Arrow IPC message at byte \d+: a second schema message$",
        ),
        (
            lambda m: b"".join(m[1:]) + END,
            r"corrupt Arrow IPC message at byte 0: a record batch before the schema",
        ),
    ],
    ids=["cut-in-length", "end-marker-only", "two-schemas", "no-schema-first"],
)
def test_streams_with_messages_cut_missing_or_out_of_order(damage: Any, match: str) -> None:
    messages = _messages(_ipc(False)[0])
    assert len(messages) == 7  # the schema, then 6 record batches
    with pytest.raises(FormatError, match=r"^s3://b/t\.arrow: " + match):
        _walk(damage(messages))
