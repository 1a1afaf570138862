"""Local Arrow IPC streams: headrace's header walk over the map (with guessed read-ahead)
against pyarrow's reader, and the index a pickled Table carries to the other side."""

from __future__ import annotations

import errno
import hashlib
import os
import pickle
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from _cold import evict, resident_bytes

pa = pytest.importorskip("pyarrow")

import headrace.formats._arrow_local as local  # noqa: E402
import headrace.formats._map_fill as map_fill  # noqa: E402
import headrace.formats._table_part as part  # noqa: E402
import headrace.io._buffers as buffers  # noqa: E402
from headrace.errors import FormatError, StorageError  # noqa: E402
from headrace.formats import Ragged, Table  # noqa: E402
from headrace.formats._arrow_remote import GUESS_AFTER  # noqa: E402
from headrace.io import PAGE  # noqa: E402


def _batches(sizes: list[int], seed: int = 0, text_len: tuple[int, int] = (0, 400)) -> pa.Table:
    """Record batches of ``sizes`` rows: text of random length, ids, a fixed-size list."""
    rng = np.random.default_rng(seed)
    out = []
    start = 0
    for n in sizes:
        lens = rng.integers(*text_len, n) if text_len[1] > text_len[0] else np.full(n, text_len[0])
        offs = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
        data = rng.integers(97, 123, int(offs[-1]), dtype=np.uint8)
        text = pa.StringArray.from_buffers(n, pa.py_buffer(offs), pa.py_buffer(data))
        ids = pa.array(np.arange(start, start + n, dtype=np.int64))
        emb = pa.FixedSizeListArray.from_arrays(pa.array(rng.random(4 * n, np.float32)), 4)
        out.append(pa.record_batch([text, ids, emb], names=["text", "id", "emb"]))
        start += n
    return pa.Table.from_batches(out)


def _write(path: Path, table: pa.Table) -> Path:
    with pa.OSFile(str(path), "wb") as f, pa.ipc.new_stream(f, table.schema) as w:
        for b in table.to_batches():
            w.write_batch(b)
    return path


def _digest(tb: Table) -> str:
    h = hashlib.sha256(np.asarray(tb.group_rows).tobytes())
    for name, col in sorted(tb.read_rows(np.arange(tb.num_rows)[::-1]).items()):
        h.update(name.encode())
        arrays = (col.values, col.offsets) if isinstance(col, Ragged) else (col,)
        for a in arrays:
            h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def _pyarrow_digest(path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The same table opened by pyarrow's stream reader (how every release before read it)."""
    with monkeypatch.context() as m:
        m.setattr(local, "WALK", False)
        tb = Table.open(path)
        assert all(p.walked is None for p in tb._parts)
        try:
            return _digest(tb)
        finally:
            tb.close()


class _Asked:
    """Counts the guessed windows (fault injection: none; the advice still goes through)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.windows: list[tuple[int, int]] = []
        real = local.will_need

        def will_need(address: int, length: int) -> None:
            self.windows.append((address, length))
            real(address, length)

        monkeypatch.setattr(local, "will_need", will_need)


UNIFORM = [1000] * 40
# Batches of every size, from 1 row to 3,000, and a few empty ones: guesses go wrong.
MIXED = [1, 3000, 0, 17, 900, 2500, 0, 5, 1200, 1199, 64, 2999, 1, 800, 400, 0, 2048, 3]


@pytest.mark.parametrize(
    ("sizes", "text_len"),
    [(UNIFORM, (100, 100)), (UNIFORM, (0, 400)), (MIXED, (0, 400))],
    ids=["uniform-fixed-width", "uniform-rows-text", "mixed"],
)
@pytest.mark.parametrize("guess", [True, False], ids=["guesses", "no-guesses"])
def test_the_walk_reads_what_pyarrow_reads(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    sizes: list[int],
    text_len: tuple[int, int],
    guess: bool,
) -> None:
    path = _write(tmp_path / "x.arrow", _batches(sizes, text_len=text_len))
    want = _pyarrow_digest(path, monkeypatch)
    asked = _Asked(monkeypatch)
    monkeypatch.setattr(local, "GUESS", guess)
    monkeypatch.setattr(local, "GUESS_SLOW_S", -1.0)  # as on slow storage: always guess
    tb = Table.open(path)
    (part,) = tb._parts
    assert part.walked is not None  # walked by headrace, not pyarrow
    assert [len(b) for b in part.batches] == list(sizes)
    # Zero-copy: every buffer a view of the map (the bodies were not read into memory).
    lo, hi = part.map_address, part.map_address + part.size
    for b in part.batches:
        for col in b.columns:
            for arr in (col, *([col.values] if hasattr(col, "values") else [])):
                for buf in arr.buffers():
                    assert not buf or lo <= buf.address <= buf.address + buf.size <= hi
    assert _digest(tb) == want
    tb.close()
    if guess and sizes is UNIFORM and text_len == (100, 100):
        assert asked.windows  # every batch the same size: guessed ahead
    if not guess:
        assert not asked.windows


def test_guesses_cover_the_headers_of_a_uniform_stream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _write(tmp_path / "x.arrow", _batches(UNIFORM, text_len=(100, 100)))
    asked = _Asked(monkeypatch)
    monkeypatch.setattr(local, "GUESS_SLOW_S", -1.0)  # as on slow storage: always guess
    tb = Table.open(path)
    (part,) = tb._parts
    index = part.walked.places
    base = part.map_address
    windows = [(a - base, a - base + n) for a, n in asked.windows]
    # Every header after the first GUESS_AFTER + 1 was asked for before the walk got there.
    for at, head in list(zip((a for a, _ in index.spans), index.heads, strict=True))[
        GUESS_AFTER + 1 :
    ]:
        assert any(lo <= at and at + head <= hi for lo, hi in windows), at
    # ... and the pages asked for are the headers' own (at most two per header here).
    pages = {p for lo, hi in windows for p in range(lo // 4096, -(-hi // 4096))}
    assert len(pages) <= 2 * len(index.spans)
    tb.close()


def test_guessing_stops_while_headers_are_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _write(tmp_path / "x.arrow", _batches(UNIFORM * 3, text_len=(100, 100)))
    counts = {}
    for slow_s in (-1.0, 1e9):  # every header read slow, then every one quick
        asked = _Asked(monkeypatch)
        monkeypatch.setattr(local, "GUESS_SLOW_S", slow_s)
        tb = Table.open(path)
        counts[slow_s] = len(asked.windows)
        tb.close()
        monkeypatch.undo()
    # Quick reads: only the batches before GUESS_CALM quick ones in a row guess.
    assert 0 < counts[1e9] <= local.GUESS_CALM * local.GUESS_AHEAD
    assert counts[1e9] < counts[-1.0]


def test_a_pickled_table_reopens_without_walking(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = [_write(tmp_path / f"s{i}.arrow", _batches([300] * 7, seed=i)) for i in range(3)]
    tb = Table.open([str(p) for p in paths])
    want = _digest(tb)
    blob = pickle.dumps(tb)
    walks = []
    real = local._MapWalk.walk

    def counted(self: Any, pa_: Any) -> Any:
        walks.append(self.url)
        return real(self, pa_)

    monkeypatch.setattr(local._MapWalk, "walk", counted)
    copy = pickle.loads(blob)
    assert walks == []
    assert _digest(copy) == want
    # The copy carries the index on: a copy of the copy does not walk either.
    again = pickle.loads(pickle.dumps(copy))
    assert walks == []
    assert _digest(again) == want
    for t in (tb, copy, again):
        t.close()
    # Closed and read again (a new loader): reopened from the index, same rows.
    assert _digest(copy) == want
    assert walks == []
    copy.close()


def _rewrite(path: Path, table: pa.Table, same_mtime: bool) -> None:
    st = os.stat(path)
    _write(path, table)
    if same_mtime:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    else:  # a coarse clock may give the rewrite the same mtime: make sure it differs
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))


def test_a_file_changed_after_pickling_is_refused_not_walked_again(tmp_path: Path) -> None:
    path = _write(tmp_path / "x.arrow", _batches([500] * 6, seed=1))
    blob = pickle.dumps(Table.open(path))
    # Same size, other rows: a batch split differently (so the old places are wrong).
    new = _batches([500] * 6, seed=2)
    _rewrite(path, pa.Table.from_batches(new.to_batches(max_chunksize=250)), same_mtime=False)
    # The copy (a worker's) was walked again and read the new rows, in 12 batches where
    # its parent planned over 6: it now refuses a file whose mtime (or inode) moved.
    # One rewritten under the same mtime is still walked again (the tests below).
    with pytest.raises(FormatError, match=r"x\.arrow: changed since it was opened"):
        pickle.loads(blob)
    fresh = Table.open(path)
    assert list(fresh.group_rows) == [250] * 12
    fresh.close()


def test_a_file_truncated_after_pickling_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path / "x.arrow", _batches([500] * 6))
    blob = pickle.dumps(Table.open(path))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(FormatError, match=r"x\.arrow: truncated"):
        pickle.loads(blob)


def test_a_file_rewritten_under_the_same_mtime_is_never_read_at_the_old_places(
    tmp_path: Path,
) -> None:
    # Size and mtime kept (a copy tool that keeps times, a clock too coarse), layout not:
    # the schema is the same, so only the headers at the old places can tell.
    path = _write(tmp_path / "x.arrow", _batches([500] * 6, text_len=(50, 50)))
    blob = pickle.dumps(Table.open(path))
    size = path.stat().st_size
    other = _batches([300, 700, 500, 500, 500, 500], seed=3, text_len=(50, 50))
    _rewrite(path, other, same_mtime=True)
    assert path.stat().st_size == size
    with pytest.raises(FormatError, match=r"x\.arrow: record batch 0 at byte \d+"):
        pickle.loads(blob)


def test_a_changed_schema_is_walked_again(tmp_path: Path) -> None:
    path = _write(tmp_path / "x.arrow", _batches([500] * 4))
    blob = pickle.dumps(Table.open(path))
    t = _batches([500] * 4)
    _rewrite(path, t.rename_columns(["text", "ID", "emb"]), same_mtime=True)
    copy = pickle.loads(blob)
    assert list(copy.columns) == ["text", "ID", "emb"]
    copy.close()


def test_dictionary_streams_are_read_by_pyarrow(tmp_path: Path) -> None:
    t = pa.table({"c": pa.array(["a", "b", "a"] * 100).dictionary_encode(), "n": np.arange(300)})
    path = _write(tmp_path / "d.arrow", t)
    tb = Table.open(path)
    assert tb._parts[0].walked is None
    assert tb.read_rows([0, 1, 299])["n"].tolist() == [0, 1, 299]
    tb.close()


def test_a_header_the_storage_cannot_read_is_a_storage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A pickled table's header pages are faulted in by MADV_POPULATE_READ: an I/O
    # error there is an error naming the file and bytes, not a SIGBUS at the read.
    path = _write(tmp_path / "x.arrow", _batches([500] * 6))
    blob = pickle.dumps(Table.open(path))

    def failing(address: int, length: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(buffers, "populate_read", failing)
    with pytest.raises(StorageError, match=r"x\.arrow: reading bytes \[\d+, \d+\) through the"):
        pickle.loads(blob)


def test_a_kernel_without_populate_still_reopens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _write(tmp_path / "x.arrow", _batches([200] * 5))
    want = _pyarrow_digest(path, monkeypatch)
    blob = pickle.dumps(Table.open(path))

    def unknown(address: int, length: int) -> None:
        raise OSError(errno.EINVAL, "Invalid argument")

    monkeypatch.setattr(buffers, "populate_read", unknown)
    monkeypatch.setattr(map_fill, "_supported", True)
    tb = pickle.loads(blob)
    assert not map_fill._supported  # said once; the pages were faulted in by the reads
    assert _digest(tb) == want
    tb.close()


def _write_file(path: Path, table: pa.Table) -> Path:
    with pa.OSFile(str(path), "wb") as f, pa.ipc.new_file(f, table.schema) as w:
        for b in table.to_batches():
            w.write_batch(b)
    return path


@pytest.mark.parametrize("sizes", [UNIFORM, MIXED], ids=["uniform", "mixed"])
def test_an_ipc_file_reads_its_batches_at_the_footers_places(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sizes: list[int]
) -> None:
    path = _write_file(tmp_path / "f.arrow", _batches(sizes))
    with monkeypatch.context() as m:  # pyarrow's get_batch, one header after another
        m.setattr(part, "footer_places", lambda whole, n: None)
        want = _digest(Table.open(path))
    filled = []
    real = local.fill_headers

    def spy(f: Any, index: Any) -> None:
        filled.append(len(index.spans))
        real(f, index)

    monkeypatch.setattr(part, "fill_headers", spy)
    tb = Table.open(path)
    assert filled == [len(sizes)]  # every header asked for at once
    (one,) = tb._parts
    lo, hi = one.map_address, one.map_address + one.size
    for b in one.batches:
        for col in b.columns:
            for buf in col.buffers():
                assert not buf or lo <= buf.address <= buf.address + buf.size <= hi
    assert _digest(tb) == want
    tb.close()


def test_an_ipc_file_with_dictionaries_is_read_by_pyarrow(tmp_path: Path) -> None:
    t = pa.table({"c": pa.array(["a", "b", "a"] * 100).dictionary_encode(), "n": np.arange(300)})
    path = _write_file(tmp_path / "d.arrow", pa.Table.from_batches(t.to_batches(max_chunksize=50)))
    mm = pa.memory_map(str(path))
    assert local.footer_places(mm.read_buffer(mm.size()), 6) is None
    tb = Table.open(path)
    assert tb.read_rows([0, 1, 299])["n"].tolist() == [0, 1, 299]
    tb.close()


def test_a_footer_not_as_expected_leaves_the_file_to_pyarrow(tmp_path: Path) -> None:
    path = _write_file(tmp_path / "f.arrow", _batches([100] * 4))
    mm = pa.memory_map(str(path))
    whole = mm.read_buffer(mm.size())
    places = local.footer_places(whole, 4)
    assert places is not None and len(places.spans) == 4
    assert local.footer_places(whole, 5) is None  # pyarrow counted other batches
    assert local.footer_places(whole.slice(0, whole.size - 1), 4) is None  # no magic at the end
    # The last block forged to offset and body 2**62: their sum wrapped past 2**63 and
    # passed as inside the file (the walk's slice then refused). Now pyarrow reads the
    # footer, and refuses it.
    (at, length), head = places.spans[-1], places.heads[-1]
    data = path.read_bytes()
    block = struct.pack("<qiiq", at, head, 0, length - head)
    assert data.count(block) == 1
    path.write_bytes(data.replace(block, struct.pack("<qiiq", 2**62, head, 0, 2**62)))
    mm = pa.memory_map(str(path))
    assert local.footer_places(mm.read_buffer(mm.size()), 4) is None
    with pytest.raises(FormatError, match=r"f\.arrow: truncated or corrupt Arrow IPC file"):
        Table.open(path)


@pytest.mark.parametrize("budget", [local.GUESS_BUDGET, 10**9], ids=["budget", "unbounded"])
def test_an_open_reads_the_headers_and_little_more(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, budget: int
) -> None:
    """Guessed windows on batches of varied lengths read no more than the budget allows,
    measured with ``mincore`` after evicting the file (unbounded: how it was, which
    read the file nearly whole where windows are wide)."""
    path = _write(tmp_path / "x.arrow", _batches([1000] * 60, text_len=(0, 400)))
    want = _pyarrow_digest(path, monkeypatch)
    evict(path)
    monkeypatch.setattr(local, "GUESS_SLOW_S", -1.0)  # as on slow storage: always guess
    monkeypatch.setattr(local, "GUESS_BUDGET", budget)
    with Table.open(path) as tb:
        opened = resident_bytes(path)
        (part,) = tb._parts
        index = part.walked.places
        heads = sum(
            -(-(at % PAGE + head) // PAGE)
            for (at, _), head in zip(index.spans, index.heads, strict=True)
        )
        assert _digest(tb) == want
    size = path.stat().st_size
    # The schema's page and each header's (one or two each), and what guesses may add.
    bound = (1 + heads * (1 + local.GUESS_BUDGET) + local.GUESS_BUDGET * local.GUESS_AHEAD) * PAGE
    if budget == local.GUESS_BUDGET:
        assert opened <= bound, (opened, bound, size)
    else:
        assert opened > bound, (opened, bound, size)


def _stream(t: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, t.schema) as w:
        w.write_table(t, max_chunksize=50)
    return bytes(sink.getvalue().to_pybytes())


@pytest.mark.parametrize("damage", ["a second schema", "a batch first", "no schema"])
def test_a_stream_whose_messages_are_out_of_order_is_named(tmp_path: Path, damage: str) -> None:
    # Each message of a stream is walked once (no up-front pass over the rows): one
    # where the format allows none is refused by its place, not read as rows.
    t = pa.table({"x": np.arange(100)})
    data = _stream(t)
    end_of_stream = b"\xff\xff\xff\xff\x00\x00\x00\x00"
    assert data.endswith(end_of_stream)
    reader = pa.BufferReader(data)
    pa.ipc.read_message(reader)
    schema_end = reader.tell()
    if damage == "a second schema":
        forged, says = data[: -len(end_of_stream)] + data, r"a second schema at byte \d+"
    elif damage == "a batch first":
        forged = data[schema_end:]
        says = r"a record batch message at byte 0 before the schema"
    else:
        forged, says = end_of_stream, r"an Arrow IPC stream without a schema message"
    path = tmp_path / "s.arrow"
    path.write_bytes(forged)
    with pytest.raises(FormatError, match=rf"s\.arrow: .*{says}"):
        Table.open(path)
