"""The header walk that faults in a mapped Arrow file's pages before pyarrow reads them
(``headrace.formats._map_guard``, used on network and FUSE mounts), on real IPC files
and streams: where their messages lie, each message's end, and bytes that do not
parse, which it leaves for pyarrow to name rather than guess at."""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from headrace.errors import StorageError
from headrace.formats import _map_guard as guard


@dataclass
class Mapped:
    path: str
    map_address: int
    size: int

    def check_size(self) -> None:
        pass


@contextmanager
def mapped(path: Path) -> Iterator[tuple[Mapped, int]]:
    fd = os.open(path, os.O_RDONLY)
    m = mmap.mmap(fd, 0, access=mmap.ACCESS_COPY)
    view = ctypes.c_char.from_buffer(m)
    try:
        yield Mapped(str(path), ctypes.addressof(view), len(m)), fd
    finally:
        del view
        m.close()
        os.close(fd)


def _table() -> pa.Table:
    return pa.table({"x": np.arange(1000, dtype=np.int64), "s": [f"r{i}" for i in range(1000)]})


def _write(path: Path, *, stream: bool, legacy: bool = False) -> Path:
    options = pa.ipc.IpcWriteOptions(use_legacy_format=legacy)
    new = pa.ipc.new_stream if stream else pa.ipc.new_file
    with pa.OSFile(str(path), "wb") as sink, new(sink, _table().schema, options=options) as w:
        w.write_table(_table(), max_chunksize=300)  # 4 record batches
    return path


def _walk(f: Mapped, ends: tuple[int, int]) -> list[int]:
    at: int | None = ends[0]
    seen = []
    while at is not None:
        seen.append(at)
        at = guard.populate_message(f, at, ends[1])
    return seen


@pytest.mark.parametrize("legacy", [False, True])
def test_a_stream_is_walked_message_by_message_to_its_end(tmp_path: Path, legacy: bool) -> None:
    path = _write(tmp_path / "s.arrows", stream=True, legacy=legacy)
    with mapped(path) as (f, fd):
        ends = guard.read_ends(f, fd)
        assert ends == (0, f.size)
        # The schema, 4 record batches, and the end marker, where the walk stops.
        starts = _walk(f, ends)
        assert len(starts) == 6
        reader = pa.ipc.open_stream(path.read_bytes())
        assert reader.read_all().equals(_table())
        guard.populate_headers(f, ends)  # the same walk, all of it faulted in


def test_a_files_messages_lie_between_its_magic_and_footer(tmp_path: Path) -> None:
    path = _write(tmp_path / "f.arrow", stream=False)
    raw = path.read_bytes()
    footer = struct.unpack_from("<i", raw, len(raw) - 10)[0]
    with mapped(path) as (f, fd):
        ends = guard.read_ends(f, fd)
        assert ends == (8, len(raw) - 10 - footer)
        assert len(_walk(f, ends)) == 6  # schema, 4 batches, the stream's end marker


@pytest.mark.parametrize(
    "damage",
    ["tiny", "magic only", "footer length", "footer magic", "negative footer"],
)
def test_ends_that_do_not_parse_are_left_for_pyarrow(tmp_path: Path, damage: str) -> None:
    raw = bytearray(_write(tmp_path / "f.arrow", stream=False).read_bytes())
    if damage == "tiny":
        raw = raw[:7]
    elif damage == "magic only":
        raw = raw[:17]
    elif damage == "footer length":
        struct.pack_into("<i", raw, len(raw) - 10, len(raw))
    elif damage == "footer magic":
        raw[-6:] = b"ARROW0"
    else:
        struct.pack_into("<i", raw, len(raw) - 10, -5)
    bad = tmp_path / "bad.arrow"
    bad.write_bytes(bytes(raw))
    with mapped(bad) as (f, fd):
        assert guard.read_ends(f, fd) is None
    with pytest.raises(pa.ArrowInvalid):  # pyarrow's open names it
        pa.ipc.open_file(bytes(raw))


@pytest.mark.parametrize(
    "damage", ["cut prefix", "cut header", "length past end", "not flatbuffers"]
)
def test_a_message_that_does_not_parse_ends_the_walk(tmp_path: Path, damage: str) -> None:
    raw = bytearray(_write(tmp_path / "s.arrows", stream=True).read_bytes())
    first = struct.unpack_from("<i", raw, 4)[0]
    second = 8 + first  # the first record batch's message
    if damage == "cut prefix":
        end = second + 6  # its continuation marker, half its length
    elif damage == "cut header":
        end = second + 2
    elif damage == "length past end":
        struct.pack_into("<i", raw, second + 4, len(raw))
        end = len(raw)
    else:
        raw[second + 8 : second + 8 + 16] = b"\xff" * 16  # its header's root offset and more
        end = len(raw)
    bad = tmp_path / "bad.arrows"
    bad.write_bytes(bytes(raw))
    with mapped(bad) as (f, _):
        assert _walk(f, (0, end)) == [0, second]


def test_a_failed_read_of_the_ends_names_the_file_and_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _write(tmp_path / "f.arrow", stream=False)

    def eio(*args: Any) -> bytes:
        raise OSError(errno.EIO, "Input/output error")

    with mapped(path) as (f, fd):
        monkeypatch.setattr(guard.os, "pread", eio)
        with pytest.raises(StorageError, match=r"f\.arrow.*Input/output error"):
            guard.read_ends(f, fd)
