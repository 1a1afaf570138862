"""Mapped readers on network and FUSE mounts fault pages in before NumPy or pyarrow reads them.

The mount type is the only thing faked (``network``: what ``/proc/mounts``
would say of an NFS or FUSE path); the faults are ``populate_read`` raising
what the kernel returns for a page the storage could not read (EFAULT). On a
real mount that fails reads: tests/integration/test_eio_matrix.py. On a local
disk nothing is populated (the fast path).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import headrace.formats._map_guard as guard
import headrace.formats._table_part as part
import headrace.formats._tables as tables
import headrace.io._buffers as buffers
from headrace.errors import StorageError
from headrace.formats import Table
from headrace.formats._map_fill import FillPolicy
from headrace.io import PAGE, LocalFile, RangeReader


def _write(path: Path, *, stream: bool = True, rows: int = 4096) -> pa.Table:
    rng = np.random.default_rng(3)
    mask = np.zeros(rows, dtype=bool)
    mask[::5] = True
    words = [f"w{i:05d}" * 8 for i in range(600)]
    t = pa.table(
        {
            "label": pa.array(rng.integers(0, 9, rows), mask=mask),
            "cat": pa.DictionaryArray.from_arrays(
                pa.array(rng.integers(0, len(words), rows).astype(np.int32)), pa.array(words)
            ),
            "vec": pa.FixedSizeListArray.from_arrays(
                pa.array(rng.standard_normal(rows * 8).astype(np.float32)), 8
            ),
        }
    )
    new = pa.ipc.new_stream if stream else pa.ipc.new_file
    with pa.OSFile(str(path), "wb") as f, new(f, t.schema) as w:
        w.write_table(t, max_chunksize=512)
    return t


def _network(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(part, "on_network_fs", lambda path: True)


def _recording(calls: list[tuple[int, int]], fail_at: int | None = None) -> Any:
    def populate(address: int, length: int) -> None:
        assert address % PAGE == 0
        calls.append((address, length))
        if fail_at is not None and address <= fail_at < address + length:
            raise OSError(errno.EFAULT, os.strerror(errno.EFAULT))

    return populate


def _headers(path: Path) -> list[int]:
    """Where each message of the stream (or of the file's stream) starts."""
    starts = []
    with pa.OSFile(str(path)) as f:
        if f.read(6) == b"ARROW1":
            f.seek(8)
        else:
            f.seek(0)
        r = pa.ipc.MessageReader.open_stream(f)
        while True:
            at = f.tell()
            try:
                r.read_next_message()
            except StopIteration:
                return starts
            starts.append(at)


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "file"])
def test_on_a_network_mount_every_header_is_populated_before_pyarrow_walks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stream: bool
) -> None:
    path = tmp_path / "t.arrow"
    want = _write(path, stream=stream)
    _network(monkeypatch)
    calls: list[tuple[int, int]] = []
    monkeypatch.setattr(buffers, "populate_read", _recording(calls))
    with Table.open(path) as tb:
        base = tb._parts[0].map_address
        got = tb.read_rows([1, 2, 4000], ["vec"])
    pages = {(a - base) // PAGE + k for a, n in calls for k in range(n // PAGE)}
    for h in _headers(path):
        assert h // PAGE in pages, h
    np.testing.assert_array_equal(
        got["vec"], want["vec"].to_numpy(zero_copy_only=False)[[1, 2, 4000]].tolist()
    )


def test_a_header_the_storage_cannot_read_fails_the_open_naming_file_and_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "t.arrow"
    _write(path)
    bad = _headers(path)[5]
    _network(monkeypatch)
    real_open = part._Part._open_arrow

    def open_arrow(self: Any, *args: Any) -> None:
        # The fault is set once the map's address is known: a page of message 5's header.
        monkeypatch.setattr(
            buffers, "populate_read", lambda a, n: _fail_if(a, n, self.map_address + bad)
        )
        real_open(self, *args)

    monkeypatch.setattr(part._Part, "_open_arrow", open_arrow)
    with pytest.raises(StorageError) as ei:
        Table.open(path)
    assert ei.value.errno == errno.EIO
    msg = str(ei.value)
    assert str(path) in msg and "through the file map failed" in msg, msg
    lo = int(msg.split("bytes [")[1].split(",")[0])
    assert lo // PAGE == bad // PAGE  # the failing page's bytes, not another's


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "file"])
def test_an_end_the_storage_cannot_read_fails_the_open_naming_file_and_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stream: bool
) -> None:
    # The end marker (a stream) or footer (a file) is read by pread on the map's own
    # descriptor before pyarrow reads it through the map: its EIO is an error naming
    # the file and the bytes, not SIGBUS.
    path = tmp_path / "t.arrow"
    _write(path, stream=stream)
    size = path.stat().st_size
    _network(monkeypatch)
    real = os.pread

    def pread(fd: int, n: int, at: int) -> bytes:
        if at + n > size - 8:  # the last 8 bytes: the end marker, or the footer's end
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real(fd, n, at)

    monkeypatch.setattr(guard.os, "pread", pread)
    with pytest.raises(StorageError) as ei:
        Table.open(path)
    monkeypatch.undo()
    assert ei.value.errno == errno.EIO
    msg = str(ei.value)
    assert str(path) in msg and f"bytes [{size - (8 if stream else 10)}, {size})" in msg, msg


def _fail_if(address: int, length: int, bad: int) -> None:
    if address <= bad < address + length:
        raise OSError(errno.EFAULT, os.strerror(errno.EFAULT))


@pytest.mark.parametrize("column", ["label", "cat"])
def test_views_populate_validity_bitmaps_and_dictionaries_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, column: str
) -> None:
    path = tmp_path / "t.arrow"
    _write(path)
    _network(monkeypatch)
    with Table.open(path) as tb:
        part = tb._parts[0]
        batch = part.batches[3]
        col = batch.column(column)
        if column == "label":
            target = col.buffers()[0]  # the validity bitmap
        else:
            target = col.dictionary.buffers()[2]  # the dictionary's string data
        calls: list[tuple[int, int]] = []
        monkeypatch.setattr(buffers, "populate_read", _recording(calls, target.address))
        with pytest.raises(StorageError, match=r"t\.arrow: reading bytes \[\d+, \d+\)"):
            tb.read_rows([3 * 512 + 1], [column])
        # Before any view touched it: the failing buffer was the first thing asked for.
        assert calls and calls[-1][0] <= target.address < sum(calls[-1])


def test_on_a_local_disk_nothing_is_populated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "t.arrow"
    _write(path)
    calls: list[tuple[int, int]] = []
    monkeypatch.setattr(buffers, "populate_read", _recording(calls))
    # The gather's page fill is the map fill's own business (on at first, anywhere):
    # off here, so that any populate left is a guard's.
    monkeypatch.setattr(tables, "_POPULATE", False)
    with Table.open(path) as tb:
        assert not tb._parts[0].network and not tb.map_fill.keep_on
        tb.read_rows([1, 701, 2001])
    np.save(tmp_path / "rows.npy", np.arange(4096 * 64, dtype=np.int32).reshape(4096, 64))
    with RangeReader("mmap") as r:
        r.read_rows(str(tmp_path / "rows.npy"), [1, 9, 4000], 256, base=128)
        assert not r.file(str(tmp_path / "rows.npy")).network
    assert calls == []


def test_the_fill_stays_on_where_it_guards_against_sigbus() -> None:
    p = FillPolicy()
    p.keep_on = True
    for _ in range(4 * p.CALM):
        p.filled(10, 0)
    assert p.on and p.switches == 0


def test_mapped_rows_on_a_network_mount_are_populated_and_a_failure_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "rows.bin"
    data = np.random.default_rng(1).integers(0, 256, 1 << 20, dtype=np.uint8)
    data.tofile(path)

    def opener(p: str) -> LocalFile:
        f = LocalFile(p)
        f._network = True  # as /proc/mounts would say of an NFS or FUSE path
        return f

    rows = np.array([3, 100, 200, 201, 900])
    calls: list[tuple[int, int]] = []
    monkeypatch.setattr(buffers, "populate_read", _recording(calls))
    with RangeReader("mmap", opener=opener) as r:
        got = r.read_rows(str(path), rows, 1000)
        base = np.frombuffer(r.file(str(path)).mapped, dtype=np.uint8).ctypes.data
        np.testing.assert_array_equal(got, data[: 1000 * 1000].reshape(1000, 1000)[rows])
        covered = {(a - base) // PAGE + k for a, n in calls for k in range(n // PAGE)}
        for row in rows.tolist():
            assert {row * 1000 // PAGE, (row * 1000 + 999) // PAGE} <= covered
        bad = base + 600 * 1000
        monkeypatch.setattr(buffers, "populate_read", _recording([], bad))
        with pytest.raises(StorageError) as ei:
            r.read_rows(str(path), [600], 1000)
        assert ei.value.errno == errno.EIO
        assert str(path) in str(ei.value) and "through the file map failed" in str(ei.value)
        # The reader reads on: rows away from the failing page still come back.
        np.testing.assert_array_equal(r.read_rows(str(path), [3], 1000)[0], data[3000:4000])
