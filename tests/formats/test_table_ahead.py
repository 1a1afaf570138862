"""A Parquet row group larger than a window, on object storage (``file://`` URLs: the
object-store path), streamed through :class:`ChunkStream`: ranged GETs a few pieces
ahead of the decoder in each column chunk, never the group whole."""

from __future__ import annotations

import errno
import hashlib
import math
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from headrace.errors import StorageError
from headrace.formats import Table
from headrace.formats import _table_remote as remote
from headrace.formats._object_files import ObjectFiles, RemoteFile
from headrace.formats._table_ahead import ChunkStream, HeldBytes
from headrace.formats._table_remote import RemoteParquet

ROWS = 30_000
SUB = 1_000  # rows a sub-window
PIECE = 8 << 10  # small pieces, depth and read buffer: many GETs a chunk, reads across pieces
DEPTH = 3
BUFFER = 16 << 10
COLUMNS = ["ids", "tok", "n", "s", "d", "x"]


def write_group(path: Path) -> Path:
    """One row group of ``ROWS`` rows, pages of 4 KiB: ints, strings and lists with nulls,
    a list column without, a dictionary-encoded string column, doubles. Only that column
    is written with a dictionary: pyarrow reads a page larger than its buffer whole, and
    a dictionary page is up to 1 MiB."""
    rng = np.random.default_rng(3)
    lengths = rng.integers(0, 40, ROWS)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    values = pa.array(rng.integers(0, 50_000, int(offsets[-1])).astype(np.int32))
    null_list = rng.random(ROWS) < 0.05
    ids = pa.ListArray.from_arrays(pa.array(offsets), values, mask=pa.array(null_list))
    tok = pa.ListArray.from_arrays(pa.array(offsets), values)
    n = pa.array(np.arange(ROWS, dtype=np.int64) * 7, mask=rng.random(ROWS) < 0.1)
    s = pa.array(
        [None if k % 13 == 0 else f"row {k} " + "x" * int(k % 50) for k in range(ROWS)],
        pa.string(),
    )
    d = pa.array([f"label-{k % 17}" for k in range(ROWS)]).dictionary_encode()
    x = pa.array(rng.random(ROWS))
    table = pa.table({"ids": ids, "tok": tok, "n": n, "s": s, "d": d, "x": x})
    pq.write_table(table, path, row_group_size=ROWS, data_page_size=4096, use_dictionary=["d"])
    return path


@pytest.fixture(scope="module")
def group_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_group(tmp_path_factory.mktemp("ahead") / "big.parquet")


@pytest.fixture
def small_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(remote, "AHEAD_PIECE", PIECE)
    monkeypatch.setattr(remote, "AHEAD_DEPTH", DEPTH)
    monkeypatch.setattr(remote, "STREAM_BUFFER", BUFFER)


def digest(batches: list[Any]) -> str:
    """SHA-256 of the batches in Arrow's IPC form (values, validity, offsets)."""
    h = hashlib.sha256()
    for b in batches:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, b.schema) as w:
            w.write_batch(b)
        h.update(sink.getvalue().to_pybytes())
    return h.hexdigest()


def remote_part(path: Path) -> tuple[Table, RemoteParquet]:
    table = Table.open(f"file://{path}")
    part = table._parts[0]
    assert isinstance(part, RemoteParquet)
    return table, part


def bound(part: RemoteParquet, names: list[str], streams: int = 1) -> int:
    """The most a stream of ``names`` may hold: per column chunk, the pieces of one read
    (a buffer, or a page when larger) and ``DEPTH`` more."""
    md = part.metadata.row_group(0)
    pages = BUFFER  # the pages are about 4 KiB (the dictionary's smaller): under the buffer
    per_chunk = PIECE * (DEPTH + math.ceil(pages / PIECE) + 1)
    chunks = len(part._chunks(0, frozenset(names)))
    assert chunks == len(names) and md.num_columns == len(COLUMNS)
    return streams * chunks * per_chunk


@pytest.mark.usefixtures("small_pieces")
def test_streamed_sub_windows_are_the_local_rows_for_every_column_type(group_file: Path) -> None:
    stored = pq.read_table(group_file)
    local = Table.open(group_file)  # the same stream, from the local file
    table, part = remote_part(group_file)
    got, want = [], []
    for first in range(0, ROWS, SUB):
        batch, skipped = part.piece(0, first, SUB, COLUMNS)
        assert skipped == 0
        assert batch.equals(stored.slice(first, SUB).combine_chunks().to_batches()[0])
        got.append(batch)
        want.append(local._parts[0].piece(0, first, SUB, COLUMNS)[0])
    assert digest(got) == digest(want)
    local.close()
    local = stored
    assert sum(b.column(2).null_count for b in got) == local.column("n").null_count > 0
    stats = table.object_stats
    assert stats is not None
    stored = part.stored_bytes(0)
    # Every chunk byte fetched once, in pieces, and the footer's 64 KiB; no other read.
    assert part.misses == 0
    assert stats.bytes == stored + (64 << 10)
    # Held at once: a few pieces a column chunk, not the group.
    assert 0 < part.held.peak <= bound(part, COLUMNS) < stored // 8
    assert part.held.now == 0  # the stream closed at the group's end: its pieces dropped
    table.close()


@pytest.mark.usefixtures("small_pieces")
def test_a_resume_mid_group_restarts_the_stream_and_gives_the_same_rows(
    group_file: Path,
) -> None:
    local = pq.read_table(group_file, columns=["s", "ids"])
    table, part = remote_part(group_file)
    batch, skipped = part.piece(0, 17_000, SUB, ["s", "ids"])
    assert skipped == 17_000
    assert batch.equals(local.slice(17_000, SUB).combine_chunks().to_batches()[0])
    # Going back starts again from the group's first row.
    batch, skipped = part.piece(0, 2_000, SUB, ["s", "ids"])
    assert skipped == 2_000
    assert batch.equals(local.slice(2_000, SUB).combine_chunks().to_batches()[0])
    assert part.held.peak <= bound(part, ["s", "ids"])
    table.close()
    assert part.held.now == 0


def test_the_loader_over_a_streamed_group_holds_a_few_pieces(
    group_file: Path, small_pieces: None
) -> None:
    from headrace.formats import TableSource
    from headrace.pipeline import Loader
    from headrace.testing import batch_digest

    kw: dict[str, Any] = {"columns": ["tok", "d", "x"], "width": 40, "window_rows": SUB}
    make = lambda where: Loader(  # noqa: E731
        TableSource(where, **kw), batch_size=50, seed=4, steps=ROWS // 50 + 40
    )
    local = make(group_file)
    want = batch_digest(local)
    ld = make(f"file://{group_file}")
    assert batch_digest(ld) == want
    table = ld.source.table
    # Decoded as the local stream is (a read across the epochs' switch restarts the group).
    assert table.misses == 0 and table.decoded_rows == local.source.table.decoded_rows
    # The epoch's stream and the next epoch's, read ahead while this one ends.
    assert 0 < table.peak_stream_bytes <= bound(table._parts[0], ["tok", "d", "x"], streams=2)
    assert table.peak_stream_bytes < table._parts[0].stored_bytes(0) // 4


def test_pieces_back_and_outside_the_chunks(tmp_path: Path) -> None:
    raw = np.random.default_rng(0).integers(0, 256, 200_000).astype(np.uint8)
    path = tmp_path / "blob"
    path.write_bytes(raw.tobytes())
    files = ObjectFiles({})
    handle = files.open(f"file://{path}", raw.size, None)
    misses: list[tuple[int, int]] = []

    def miss(offset: int, length: int) -> Any:
        misses.append((offset, length))
        return raw[offset : offset + length].copy()

    held = HeldBytes()
    chunks = [(1_000, 50_000), (60_000, 150_000)]
    st = ChunkStream(
        "blob", raw.size, frozenset(), chunks, lambda: handle, miss, held, piece=4096, depth=2
    )
    assert held.now == 2 * 2 * 4096  # two pieces a chunk started
    for a, n in [(1_000, 3_000), (4_000, 10_000), (60_000, 5_000), (14_000, 36_000)]:
        st.seek(a)
        assert bytes(st.read(n)) == raw[a : a + n].tobytes()
    assert not misses
    assert held.peak <= (36_000 // 4096 + 2 + 2) * 4096 + 3 * 4096
    st.seek(2_000)  # back: the chunk's pieces start again there
    assert bytes(st.read(5_000)) == raw[2_000:7_000].tobytes()
    st.seek(45_000)  # across the end of a chunk, a gap and into the next
    assert bytes(st.read(20_000)) == raw[45_000:65_000].tobytes()
    assert misses == [(50_000, 10_000)]
    st.close()
    assert held.now == 0
    with pytest.raises(ValueError, match="closed"):
        st.read(10)
    files.close()


def failing_reads(monkeypatch: pytest.MonkeyPatch, fail_from: int, times: int) -> list[int]:
    """Fault injection: GETs at or after ``fail_from`` fail (EIO), ``times`` of them."""
    real = RemoteFile.read_into
    failed: list[int] = []

    def read_into(self: RemoteFile, out: Any, offset: int) -> Future[None]:
        if offset >= fail_from and len(failed) < times:
            failed.append(offset)
            f: Future[None] = Future()
            f.set_exception(StorageError(errno.EIO, f"{self.path}, bytes [{offset}, ...): EIO"))
            return f
        return real(self, out, offset)

    monkeypatch.setattr(RemoteFile, "read_into", read_into)
    return failed


@pytest.mark.usefixtures("small_pieces")
def test_a_failed_get_mid_group_is_named_and_the_reread_loses_nothing(
    group_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    local = pq.read_table(group_file, columns=["ids"])
    table, part = remote_part(group_file)
    part.piece(0, 0, SUB, ["ids"])
    ((start, end),) = part._chunks(0, frozenset(["ids"]))
    failed = failing_reads(monkeypatch, start + (end - start) // 2, times=1)
    with pytest.raises(StorageError, match=r"big\.parquet, bytes \[\d+") as info:
        for first in range(SUB, ROWS, SUB):
            part.piece(0, first, SUB, ["ids"])
    assert failed and any(
        re_note.startswith(f"file://{group_file}: row group 0: rows [")
        for re_note in getattr(info.value, "__notes__", [])
    )
    assert part.held.now == 0  # the failed stream closed: nothing held
    # The next read starts the group again; every row comes back as stored.
    bad = int(info.value.__notes__[0].split("rows [")[1].split(",")[0])
    batch, skipped = part.piece(0, bad, SUB, ["ids"])
    assert skipped == bad
    assert batch.equals(local.slice(bad, SUB).combine_chunks().to_batches()[0])
    table.close()


@pytest.mark.usefixtures("small_pieces")
def test_a_failed_read_ahead_piece_is_tried_once_more_when_needed(
    group_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    local = pq.read_table(group_file, columns=["x"])
    table, part = remote_part(group_file)
    failed = failing_reads(monkeypatch, 0, times=1)  # the first piece started ahead
    ahead = part.stream_fetch(0, frozenset(["x"]))
    ahead.ahead = True  # as Table.prefetch marks it
    batch, _ = part.piece(0, 0, SUB, ["x"], ahead)
    assert len(failed) == 1
    assert batch.equals(local.slice(0, SUB).combine_chunks().to_batches()[0])
    # Made by a batch, not a read-ahead: the failure is the batch's.
    table.close()
    table, part = remote_part(group_file)
    failing_reads(monkeypatch, 0, times=1)
    with pytest.raises(StorageError, match="EIO"):
        part.piece(0, 0, SUB, ["x"])
    assert part.held.now == 0
    table.close()
