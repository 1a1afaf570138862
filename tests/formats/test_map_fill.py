"""A batch's pages of a mapped Arrow file are faulted in on the I/O pool before the gather.

What is filled (every row's bytes, found from pyarrow's own buffer addresses,
not from the code under test), how runs are formed (property test), and what
a failed fill says (fault injection: ``populate_read`` raising what the kernel
would). The speed-up on a slow mount is in benchmarks/arrow_slowfs.py; the
reads in flight on a real one in tests/integration/test_slow_mount_tables.py.
"""

from __future__ import annotations

import errno
import itertools
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import headrace.formats._map_fill as map_fill
import headrace.formats._tables as tables
import headrace.io._buffers as buffers
from headrace.errors import ReadEOFError, StorageError
from headrace.formats import Table
from headrace.io import PAGE

ROWS = 3000


def _write(path: Path, rows: int = ROWS) -> pa.Table:
    rng = np.random.default_rng(5)
    lens = rng.integers(0, 700, rows)
    offs = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    t = pa.table(
        {
            "ids": pa.ListArray.from_arrays(
                pa.array(offs), pa.array(rng.integers(0, 2**31, int(offs[-1]), dtype=np.int32))
            ),
            "label": pa.array(rng.integers(0, 10, rows)),
            "vec": pa.FixedSizeListArray.from_arrays(
                pa.array(rng.standard_normal(rows * 16).astype(np.float32)), 16
            ),
            "text": pa.array([f"row {i} " * int(n % 9) for i, n in enumerate(lens)]),
        }
    )
    with pa.OSFile(str(path), "wb") as f, pa.ipc.new_stream(f, t.schema) as w:
        w.write_table(t, max_chunksize=1000)
    return t


def _row_ranges(tb: Table, rows: np.ndarray) -> list[tuple[int, int]]:
    """Absolute byte ranges of every value of ``rows``, from pyarrow's buffers."""
    out = []
    part = tb._parts[0]
    for r in rows.tolist():
        batch = part.batches[r // 1000]
        i = r % 1000
        lab = batch.column("label")
        out.append((lab.buffers()[1].address + (lab.offset + i) * 8, 8))
        vec = batch.column("vec")
        out.append((vec.values.buffers()[1].address + (vec.offset + i) * 64, 64))
        ids = batch.column("ids")
        o = np.frombuffer(ids.buffers()[1], dtype=np.int32)
        out.append((ids.buffers()[1].address + (ids.offset + i) * 4, 8))
        a, b = int(o[ids.offset + i]), int(o[ids.offset + i + 1])
        out.append((ids.buffers()[3].address + a * 4, (b - a) * 4))
        text = batch.column("text")
        so = np.frombuffer(text.buffers()[1], dtype=np.int32)
        out.append((text.buffers()[1].address + (text.offset + i) * 4, 8))
        a, b = int(so[text.offset + i]), int(so[text.offset + i + 1])
        out.append((text.buffers()[2].address + a, b - a))
    return [(a, n) for a, n in out if n]


def test_every_byte_a_gather_reads_was_filled_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "t.arrow"
    want = _write(path)
    filled: list[tuple[int, int]] = []
    real = buffers.populate_read

    def recording(address: int, length: int) -> None:
        filled.append((address, address + length))
        real(address, length)

    monkeypatch.setattr(buffers, "populate_read", recording)
    rows = np.random.default_rng(1).choice(ROWS, 64, replace=False)
    with Table.open(path) as tb:
        got = tb.read_rows(rows)
        need = _row_ranges(tb, rows)
        lo = tb._parts[0].map_address
        hi = lo + tb._parts[0].size
    np.testing.assert_array_equal(got["label"], want["label"].to_numpy()[rows])
    ids = got["ids"]
    assert [ids.row(i).tolist() for i in range(len(rows))] == [
        want["ids"][int(r)].as_py() for r in rows
    ]
    assert filled, "nothing was filled"
    runs = sorted(filled)
    for a, n in need:
        for page in range(a // PAGE * PAGE, a + n, PAGE):
            assert any(s <= page < e for s, e in runs), f"page {page:#x} not filled"
    # Only whole pages of the map (the offsets' and the values' runs may share a page).
    assert all(lo <= s < e <= -(-hi // PAGE) * PAGE and s % PAGE == 0 for s, e in runs)


def test_without_the_fill_the_same_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "t.arrow"
    _write(path)
    rows = np.random.default_rng(2).choice(ROWS, 100, replace=False)
    with Table.open(path) as tb:
        a = tb.read_rows(rows)
        monkeypatch.setattr(tables, "_POPULATE", False)
        b = tb.read_rows(rows)
    for k in ("label", "vec"):
        np.testing.assert_array_equal(a[k], b[k])
    for k in ("ids", "text"):
        np.testing.assert_array_equal(a[k].values, b[k].values)
        np.testing.assert_array_equal(a[k].offsets, b[k].offsets)


class _Map:
    def __init__(self, address: int, size: int) -> None:
        self.path, self.map_address, self.size = "/data/x.arrow", address, size

    def check_size(self) -> None:
        pass


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 64 * PAGE),
    st.lists(st.tuples(st.integers(-PAGE, 70 * PAGE), st.integers(0, 3 * PAGE)), max_size=40),
)
def test_page_runs_cover_the_ranges_in_the_map_and_nothing_outside(
    size: int, ranges: list[tuple[int, int]]
) -> None:
    base = 1000 * PAGE
    f = _Map(base, size)
    addr = np.array([base + a for a, _ in ranges], dtype=np.int64)
    length = np.array([n for _, n in ranges], dtype=np.int64)
    runs = map_fill.page_runs(addr, length, f)
    end = base + -(-size // PAGE) * PAGE
    for s, e in runs:
        assert s % PAGE == 0 and e % PAGE == 0 and base <= s < e <= end
    for (s1, e1), (s2, e2) in itertools.pairwise(runs):
        # closer runs are merged, unless together they would pass RUN
        assert s2 > e1 + map_fill.GAP or max(e1, e2) - s1 > map_fill.RUN
    for a, n in zip(addr.tolist(), length.tolist(), strict=True):
        if n > 0 and a >= base and a + n <= base + size:  # in the map: filled
            assert any(s <= a and a + n <= e for s, e in runs)


def _failing(code: int) -> Any:
    def populate(address: int, length: int) -> None:
        raise OSError(code, os.strerror(code))

    return populate


def test_an_io_error_under_the_map_is_an_error_naming_the_file_and_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "t.arrow"
    _write(path)
    # EFAULT is what the kernel returns for a page the storage could not read.
    monkeypatch.setattr(buffers, "populate_read", _failing(errno.EFAULT))
    with Table.open(path) as tb, pytest.raises(StorageError) as ei:
        tb.read_rows(np.arange(0, ROWS, 300))
    assert ei.value.errno == errno.EIO
    msg = str(ei.value)
    assert str(path) in msg and "through the file map failed" in msg and "I/O error" in msg
    assert "reading bytes [" in msg


def test_eio_from_the_fill_is_raised_as_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "t.arrow"
    _write(path)
    monkeypatch.setattr(buffers, "populate_read", _failing(errno.EIO))
    with Table.open(path) as tb, pytest.raises(StorageError) as ei:
        tb.read_rows([5])
    assert ei.value.errno == errno.EIO and str(path) in str(ei.value)


def test_a_file_that_shrank_under_the_fill_is_named_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "t.arrow"
    _write(path)
    with Table.open(path) as tb:
        part = tb._parts[0]
        runs = [(part.map_address, part.map_address + PAGE)]
        os.truncate(path, part.size // 2)  # after read_rows' own size check
        monkeypatch.setattr(buffers, "populate_read", _failing(errno.EFAULT))
        with pytest.raises(ReadEOFError, match="shrank"):
            map_fill.fill_pages([(part, runs)])


def test_a_kernel_without_the_advice_reads_on_by_faults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "t.arrow"
    want = _write(path)
    calls = []

    def old_kernel(address: int, length: int) -> None:
        calls.append(address)
        raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))

    monkeypatch.setattr(buffers, "populate_read", old_kernel)
    monkeypatch.setattr(map_fill, "_supported", True)
    rows = np.arange(7, ROWS, 500)
    with Table.open(path) as tb:
        got = tb.read_rows(rows)
        n = len(calls)
        again = tb.read_rows(rows)
    assert n >= 1 and len(calls) == n  # asked (once per I/O thread at most), then never again
    assert not map_fill._supported
    np.testing.assert_array_equal(got["label"], want["label"].to_numpy()[rows])
    np.testing.assert_array_equal(again["label"], got["label"])


def test_the_policy_stops_filling_resident_pages_and_starts_on_slow_gathers() -> None:
    p = map_fill.FillPolicy()
    assert p.on  # a first batch from cold storage gains the most
    for _ in range(p.CALM - 1):
        p.filled(10, 0)
    p.filled(10, 3)  # three pages came from storage: not calm yet
    assert p.on
    for _ in range(p.CALM):
        p.filled(10, 0)
    assert not p.on and p.switches == 1
    p.gathered(0.004, 32)  # a fast gather: nothing faulted to storage
    p.gathered(0.5, 8192)  # a big batch at memory speed (61 us a row)
    assert not p.on
    p.gathered(0.05, 32)
    assert p.on and p.switches == 2
    assert p.to_dict() == {
        "on": True,
        "fills": 2 * p.CALM,
        "runs": 20 * p.CALM,
        "storage_faults": 3,
        "switches": 2,
    }


def test_filling_resident_pages_takes_no_major_fault(tmp_path: Path) -> None:
    path = tmp_path / "t.arrow"
    _write(path)
    with Table.open(path) as tb:
        part = tb._parts[0]
        runs = [(part.map_address, part.map_address + part.size // PAGE * PAGE)]
        map_fill.fill_pages([(part, runs)])  # now every page is in memory
        assert map_fill.fill_pages([(part, runs)]) == 0
        for _ in range(map_fill.FillPolicy.CALM + 1):
            tb.read_rows(np.arange(0, ROWS, 50))
        assert not tb.map_fill.on  # the policy saw it too
        assert tb.map_fill.storage_faults == 0


def test_a_table_fills_only_while_its_policy_is_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "t.arrow"
    want = _write(path)
    calls: list[int] = []
    real = buffers.populate_read

    def counting(address: int, length: int) -> None:
        calls.append(address)
        real(address, length)

    monkeypatch.setattr(buffers, "populate_read", counting)
    rows = np.arange(3, ROWS, 97)
    with Table.open(path) as tb:
        tb.map_fill.on = False
        off = tb.read_rows(rows)
        assert calls == []
        tb.map_fill.gathered(1.0, rows.size)  # as a gather by slow page faults would
        on = tb.read_rows(rows)
        assert calls and tb.map_fill.fills >= 1
    for got in (off, on):
        np.testing.assert_array_equal(got["label"], want["label"].to_numpy()[rows])


def test_prefetch_reads_whole_spans_ahead_under_the_windowed_shuffle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "t.arrow"
    _write(path)
    filled: list[tuple[int, int]] = []
    real = buffers.populate_read

    def recording(address: int, length: int) -> None:
        filled.append((address, address + length))
        real(address, length)

    monkeypatch.setattr(buffers, "populate_read", recording)
    with Table.open(path, columns=["ids", "label"]) as tb:
        tb.prefetch([1], ["ids", "label"])
        tb._read_ahead.wait()
        batch = tb._parts[0].batches[1]
        want = [
            (buf.address, buf.size)
            for col in (batch.column("ids"), batch.column("label"))
            for buf in col.buffers()
            if buf is not None and buf.size
        ]
        for a, n in want:  # every page of span 1's column buffers was asked for
            for page in range(a // PAGE * PAGE, a + n, PAGE):
                assert any(s <= page < e for s, e in filled), f"page {page:#x} not filled"
        assert all(e - s <= map_fill.PIECE for s, e in filled)  # in pieces, side by side
        n = len(filled)
        tb.prefetch([1], ["ids", "label"])  # asked once: not again
        tb._read_ahead.wait()
        assert len(filled) == n


def test_a_failed_read_ahead_is_left_to_the_read_that_needs_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "t.arrow"
    want = _write(path)
    monkeypatch.setattr(buffers, "populate_read", _failing(errno.EIO))
    with Table.open(path) as tb:
        tb.prefetch([0, 1, 2], ["label"])  # nothing raised here
        tb._read_ahead.wait()
        with pytest.raises(StorageError, match="through the file map failed"):
            tb.read_rows([5])  # the read's own fill meets the error and names it
        monkeypatch.setattr(buffers, "populate_read", lambda a, n: None)
        np.testing.assert_array_equal(tb.read_rows([5])["label"], want["label"].to_numpy()[[5]])


def test_close_cancels_read_ahead_not_started_and_waits_for_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "t.arrow"
    _write(path)
    started, release = threading.Event(), threading.Event()
    calls: list[int] = []

    def slow(address: int, length: int) -> None:
        calls.append(address)
        started.set()
        release.wait(30)  # a bound on hanging, not a speed check

    monkeypatch.setattr(buffers, "populate_read", slow)
    tb = Table.open(path)
    ra = tb._read_ahead
    ra.depth = 2  # fewer at once than pieces: the rest wait their turn
    tb.prefetch(range(3), list(tb.columns))
    queued = len(ra._queue)
    pending = list(ra._running)
    try:
        assert started.wait(30) and queued > 0
        closer = threading.Thread(target=tb.close)
        closer.start()
        closer.join(0.2)
        assert closer.is_alive()  # waits for the fills that run
    finally:
        release.set()
    closer.join(30)
    assert not closer.is_alive()
    assert all(f.done() for f in pending)
    assert len(calls) <= 2 and not ra._queue  # the waiting pieces never ran


def test_a_windowed_table_source_reads_its_windows_ahead_with_the_same_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from headrace.formats import TableSource
    from headrace.pipeline import Loader
    from headrace.testing import batch_digest

    path = tmp_path / "t.arrow"
    _write(path)

    def run() -> tuple[str, int]:
        src = TableSource(path, columns=["ids", "label"], width=700, shuffle="window",
                          window_rows=1000)  # fmt: skip
        with Loader(src, batch_size=16, seed=2, steps=200) as ld:
            got = batch_digest(list(ld))
            ahead = len(src.table._ahead)  # before closing the loader closes the source
        src.close()
        return got, ahead

    with_ahead, spans = run()
    monkeypatch.setattr(tables, "_READ_AHEAD", False)
    without, none = run()
    assert with_ahead == without
    assert spans == 3 and none == 0  # all three windows' record batches were read ahead


_SHRUNK_AHEAD = """
import os, sys
import numpy as np
import pyarrow as pa
from headrace.errors import ReadEOFError
from headrace.formats import Table

path, n = sys.argv[1], 400_000
# Nulls: a span's views read its validity bitmap, through the map, when they are made.
x = pa.array([None if i % 5 == 0 else i for i in range(n)], pa.int64())
with pa.OSFile(path, "wb") as f, pa.ipc.new_stream(f, pa.schema([("x", pa.int64())])) as w:
    w.write_table(pa.table({"x": x}), max_chunksize=50_000)
with Table.open(path) as tb:
    os.truncate(path, tb._parts[0].size // 4)
    try:
        tb.prefetch(tb.spans_of(np.array([n - 1])), ["x"])
    except ReadEOFError as exc:
        print("refused:", exc)
"""


def test_read_ahead_of_a_file_that_shrank_is_refused_not_a_crash(tmp_path: Path) -> None:
    # As read_rows does: the spans' views touch mapped pages (a validity bitmap here),
    # and those a truncation took away are SIGBUS, which killed the process.
    import subprocess
    import sys

    path = tmp_path / "t.arrow"
    done = subprocess.run(
        [sys.executable, "-c", _SHRUNK_AHEAD, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert f"refused: {path}: the file shrank from" in done.stdout


def test_a_long_stretch_is_cut_into_runs_filled_side_by_side() -> None:
    # A window's rows merged into one stretch: one populate would keep a READ or two
    # in flight for all of it; runs of at most RUN let the threads share it.
    base = 1000 * PAGE
    f = _Map(base, 8 * map_fill.RUN)
    rows = np.arange(0, 8 * map_fill.RUN, 16 * 1024, dtype=np.int64)
    runs = map_fill.page_runs(base + rows, np.full(rows.size, 4096, np.int64), f)
    assert len(runs) >= 8 and all(e - s <= map_fill.RUN for s, e in runs)
    assert runs[0][0] == base and runs[-1][1] >= base + int(rows[-1]) + 4096
    assert all(e1 <= s2 for (_, e1), (s2, _) in itertools.pairwise(runs))


def test_an_interrupted_fill_leaves_its_pages_to_the_gather(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # EINTR / EAGAIN from the kernel: the pages are not filled now; the gather faults
    # them in as before, and nothing is raised.
    path = tmp_path / "t.arrow"
    want = _write(path)
    for code in (errno.EINTR, errno.EAGAIN):
        monkeypatch.setattr(buffers, "populate_read", _failing(code))
        rows = np.arange(11, ROWS, 211)
        with Table.open(path) as tb:
            got = tb.read_rows(rows)
        np.testing.assert_array_equal(got["label"], want["label"].to_numpy()[rows])
