"""RangeReader: every strategy returns the same bytes, in caller order."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from headrace.errors import ConfigError, ReadEOFError, StorageError
from headrace.io import (
    ENGINES,
    STRATEGIES,
    AdaptivePolicy,
    RangeReader,
    RangeStore,
    ReaderConfig,
)
from headrace.io._uring import ring_pool

FILE_BYTES = 3 * 1024 * 1024 + 1234  # as in conftest.py

ALL = list(STRATEGIES)
# Every engine that can run here ("uring" needs a kernel that allows io_uring).
URING = ring_pool().available()
RUNNABLE_ENGINES = [e for e in ENGINES if e != "uring" or URING]


def test_strategies_listed() -> None:
    assert set(ALL) == {"adaptive", "mmap", "pread", "odirect", "odirect-serial"}


@pytest.mark.parametrize("strategy", ALL)
def test_reader_is_a_range_store(strategy: str) -> None:
    with RangeReader(strategy) as r:  # type: ignore[arg-type]
        assert isinstance(r, RangeStore)


def test_all_strategies_and_engines_give_identical_digests(data_file) -> None:
    """SHA-256 over thousands of random rows, plus ranges, for every strategy x engine.

    Rows at an unaligned base (4100 bytes from byte 77) and aligned ones (4096
    from 0, the last one ending 1234 bytes before the end of the file), and
    ranges of which some end exactly at the end of the file.
    """
    path, data = data_file
    rng = np.random.default_rng(11)
    shapes = [(4100, 77), (4096, 0)]
    batches = []
    for b in range(8):
        width, base = shapes[b % 2]
        last = (FILE_BYTES - base) // width - 1
        batches.append((width, base, np.append(rng.integers(0, last, 500), last)))
    ranges = np.stack([rng.integers(0, FILE_BYTES - 9000, 400), rng.integers(0, 9000, 400)], 1)
    tail = rng.integers(1, 70_000, 20)
    ranges = np.concatenate([ranges, np.stack([FILE_BYTES - tail, tail], 1)])
    expect = hashlib.sha256()
    for width, base, idx in batches:
        for i in idx.tolist():
            expect.update(data[base + i * width : base + (i + 1) * width].tobytes())
    for o, n in ranges.tolist():
        expect.update(data[o : o + n].tobytes())
    digests = {}
    for strategy in ALL:
        for engine in RUNNABLE_ENGINES:
            # A tiny slow threshold makes the adaptive reader switch modes on the way.
            policy = AdaptivePolicy(slow_read_s=1e-4, probe_every=3)
            cfg = ReaderConfig(strategy=strategy, engine=engine, policy=policy)  # type: ignore[arg-type]
            h = hashlib.sha256()
            with RangeReader(cfg) as r:
                for width, base, idx in batches:
                    rows = r.read_rows(str(path), idx, width, base=base)
                    assert rows.shape == (len(idx), width)
                    h.update(rows.tobytes())
                for arr in r.read(str(path), ranges):
                    h.update(arr.tobytes())
                s = r.stats
                assert s.reads == len(batches) + 1
                assert s.rows == 8 * 501 + 420
                if strategy in ("pread", "odirect"):
                    ran = ("uring" if URING else "threads") if engine == "auto" else engine
                    assert s.reads_by_engine == {ran: 9} and s.engine == ran
                elif strategy == "odirect-serial":  # auto leaves one read at a time to threads
                    assert s.engine == ("uring" if engine == "uring" else "threads")
            digests[strategy, engine] = h.hexdigest()
    assert set(digests.values()) == {expect.hexdigest()}, digests


@pytest.mark.parametrize("engine", RUNNABLE_ENGINES)
@pytest.mark.parametrize("strategy", ALL)
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    ranges=st.lists(
        st.tuples(st.integers(0, FILE_BYTES), st.integers(0, 70_000)).map(
            lambda t: (t[0], min(t[1], FILE_BYTES - t[0]))
        ),
        max_size=40,
    ),
    max_gap=st.sampled_from([0, 100, 65536]),
    max_span=st.sampled_from([1, 5000, 4 << 20]),
)
def test_any_ranges_through_each_strategy(
    data_file, strategy, engine, ranges, max_gap, max_span
) -> None:
    path, data = data_file
    if ranges:
        ranges = [*ranges, ranges[0]]  # always a duplicate
    cfg = ReaderConfig(
        strategy=strategy,
        max_gap=max_gap,
        max_span=max_span,
        in_flight=4,
        engine=engine,
        policy=AdaptivePolicy(slow_read_s=1e-6, probe_every=2),
    )
    with RangeReader(cfg) as r:
        for _ in range(2):  # the adaptive reader changes mode in between
            got = r.read(str(path), ranges)
            assert [g.tobytes() for g in got] == [data[o : o + n].tobytes() for o, n in ranges]


@pytest.mark.parametrize("strategy", ALL)
def test_read_into_and_rows_options(data_file, strategy) -> None:
    path, data = data_file
    with RangeReader(strategy) as r:
        outs = [bytearray(10), np.zeros(5, dtype=np.uint8), np.zeros(2, dtype=np.uint32)]
        r.read_into(str(path), [(5, 10), (FILE_BYTES - 5, 5), (0, 8)], outs)
        assert bytes(outs[0]) == data[5:15].tobytes()
        assert outs[1].tobytes() == data[-5:].tobytes()
        assert outs[2].tobytes() == data[:8].tobytes()
        # Stride and base: the first 3 bytes of 10-byte records after a 4-byte header.
        out = np.empty((3, 3), dtype=np.uint8)
        got = r.read_rows(str(path), [2, 0, 2], 3, base=4, stride=10, out=out)
        assert got is out
        assert out.tolist() == [data[24:27].tolist(), data[4:7].tolist(), data[24:27].tolist()]
        assert r.read_rows(str(path), [], 8).shape == (0, 8)
        assert r.read(str(path), []) == []
        assert r.read(str(path), [(FILE_BYTES, 0)])[0].size == 0
        assert r.size(str(path)) == FILE_BYTES


def test_large_single_range_is_read_in_chunks(data_file) -> None:
    path, data = data_file
    for strategy in ("pread", "odirect"):
        cfg = ReaderConfig(strategy=strategy, max_span=256 * 1024, in_flight=4)  # type: ignore[arg-type]
        with RangeReader(cfg) as r:
            (got,) = r.read(str(path), [(3, FILE_BYTES - 3)])
            assert np.array_equal(got, data[3:])
            assert r.stats.bytes_read >= FILE_BYTES - 3


def test_stats_count_bytes(data_file) -> None:
    path, _ = data_file
    with RangeReader("odirect-serial") as r:
        r.read(str(path), [(1, 10), (5000, 10)])
        s = r.stats
        assert s.bytes_requested == 20
        assert s.bytes_read == 2 * 4096  # one span [1, 5010) widened to [0, 8192)
        assert s.current_mode == "odirect" and s.reads_by_mode == {"odirect": 1}
        assert s.seconds >= 0
    with RangeReader("pread") as r:
        r.read(str(path), [(1, 10), (5000, 10)])
        assert r.stats.bytes_read == 5009  # one coalesced span [1, 5010)


def test_eof_names_path_and_range(data_file) -> None:
    path, _ = data_file
    for strategy in ALL:
        with RangeReader(strategy) as r:  # type: ignore[arg-type]
            with pytest.raises(ReadEOFError, match=r"range 1 = bytes \[3146900, 3147000\)") as ei:
                r.read(str(path), [(0, 1), (3146900, 100)])
            assert str(path) in str(ei.value) and str(FILE_BYTES) in str(ei.value)
            with pytest.raises(ReadEOFError):
                r.read_rows(str(path), [FILE_BYTES], 1)


def test_file_grown_after_open_is_read(tmp_path: Path) -> None:
    p = tmp_path / "grow.bin"
    p.write_bytes(b"a" * 5000)
    for strategy in ALL:
        with RangeReader(strategy) as r:  # type: ignore[arg-type]
            assert r.read(str(p), [(0, 3)])[0].tobytes() == b"aaa"
            with p.open("ab") as fh:
                fh.write(b"b" * 10)
            assert r.read(str(p), [(4998, 4)])[0].tobytes() == b"aabb"
            p.write_bytes(b"a" * 5000)


def test_file_empty_when_opened_then_grown_is_read(tmp_path: Path) -> None:
    # An empty file cannot be mapped; once it has grown, mapped strategies
    # must fall back to positional reads like any file grown past its map.
    p = tmp_path / "late.bin"
    for strategy in ALL:
        p.write_bytes(b"")
        with RangeReader(strategy) as r:  # type: ignore[arg-type]
            assert r.size(str(p)) == 0  # opened (and cached) while empty
            p.write_bytes(b"xyz")
            assert r.read(str(p), [(1, 2)])[0].tobytes() == b"yz"


def test_empty_file(tmp_path: Path) -> None:
    p = tmp_path / "empty.bin"
    p.write_bytes(b"")
    for strategy in ALL:
        with RangeReader(strategy) as r:  # type: ignore[arg-type]
            assert r.read(str(p), [(0, 0)])[0].size == 0
            with pytest.raises(ReadEOFError):
                r.read(str(p), [(0, 1)])


def test_missing_file_and_closed_reader(tmp_path: Path) -> None:
    r = RangeReader("pread")
    with pytest.raises(FileNotFoundError, match="no such file"):
        r.read(str(tmp_path / "nope"), [(0, 1)])
    r.close()
    assert r.closed
    with pytest.raises(StorageError, match="reader is closed"):
        r.read(str(tmp_path / "nope"), [(0, 1)])


def test_one_open_file_per_path(data_file) -> None:
    path, _ = data_file
    with RangeReader("adaptive") as r:
        f = r.file(str(path))
        r.read(str(path), [(0, 4)])
        r.read_rows(str(path), [1], 4)
        assert r.file(str(path)) is f
        assert "files=1" in repr(r)
    assert f.closed


def test_bad_config_and_arguments(data_file) -> None:
    path, _ = data_file
    with pytest.raises(ConfigError, match="Unknown read strategy 'fast'"):
        ReaderConfig(strategy="fast")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="in_flight"):
        ReaderConfig(in_flight=0)
    with pytest.raises(ConfigError, match=r"in_flight .*\(got True\)"):
        ReaderConfig(in_flight=True)  # as the sources' in_flight= refuses it
    with pytest.raises(ConfigError, match="alignment"):
        ReaderConfig(alignment=1000)
    with pytest.raises(ConfigError, match="max_span"):
        ReaderConfig(max_span=0)
    with pytest.raises(ConfigError, match="slow_read_s"):
        AdaptivePolicy(slow_read_s=0)
    with pytest.raises(ConfigError, match="probe_every"):
        AdaptivePolicy(probe_every=1)
    with RangeReader("pread") as r:
        with pytest.raises(ConfigError, match="2 ranges but 1 buffers"):
            r.read_into(str(path), [(0, 1), (1, 1)], [bytearray(1)])
        with pytest.raises(ConfigError, match="holds 2 bytes; its range asks for 1"):
            r.read_into(str(path), [(0, 1)], [bytearray(2)])
        with pytest.raises(ConfigError, match="read-only"):
            r.read_into(str(path), [(0, 1)], [b"x"])
        with pytest.raises(ConfigError, match="not a contiguous buffer"):
            r.read_into(str(path), [(0, 1)], [np.zeros((2, 2), np.uint8)[:, :1]])
        with pytest.raises(ConfigError, match="1-D sequence of integers"):
            r.read_rows(str(path), [[1]], 4)
        with pytest.raises(ConfigError, match="non-negative"):
            r.read_rows(str(path), [-1], 4)
        with pytest.raises(ConfigError, match="row_bytes"):
            r.read_rows(str(path), [1], 0)
        with pytest.raises(ConfigError, match="base"):
            r.read_rows(str(path), [1], 4, base=-1)
        with pytest.raises(ConfigError, match="shape"):
            r.read_rows(str(path), [1], 4, out=np.empty((1, 5), np.uint8))


def test_odirect_unsupported_filesystem_is_a_config_error(data_file, monkeypatch) -> None:
    path, _ = data_file
    real_open = os.open

    def refuse_direct(p, flags, *a):
        if flags & os.O_DIRECT:
            raise OSError(22, "Invalid argument")
        return real_open(p, flags, *a)

    monkeypatch.setattr(os, "open", refuse_direct)
    with RangeReader("odirect") as r:
        with pytest.raises(ConfigError, match=r"does not support O_DIRECT.*'pread'"):
            r.read(str(path), [(0, 1)])


@pytest.mark.parametrize(
    ("errno_", "says"),
    [(24, r"Too many open files"), (13, r"Permission denied")],
)
def test_odirect_refused_for_another_reason_is_a_storage_error_naming_the_file(
    data_file, monkeypatch, errno_, says
) -> None:
    # Out of descriptors, or a file readable buffered but not reopened (a policy
    # refusing O_DIRECT): the storage said no, not the filesystem's support; and the
    # reader stays usable.
    path, _ = data_file
    real_open = os.open

    def refuse_direct(p, flags, *a):
        if flags & os.O_DIRECT:
            raise OSError(errno_, os.strerror(errno_))
        return real_open(p, flags, *a)

    monkeypatch.setattr(os, "open", refuse_direct)
    with RangeReader("odirect") as r:
        with pytest.raises(StorageError, match=rf"(?i){path.name}.*{says}") as info:
            r.read(str(path), [(0, 1)])
        assert info.value.errno == errno_ and not isinstance(info.value, ConfigError)
        monkeypatch.setattr(os, "open", real_open)
        assert r.read(str(path), [(0, 1)])[0].size == 1


def test_mapped_reads_count_the_pages_they_fault_in(data_file) -> None:
    # A mapped read's bytes are its page faults' (4 KiB each), not the bytes asked for,
    # counted per row as the naive per-row memmap is: a row across a boundary is two.
    path, _ = data_file
    with RangeReader("mmap") as r:
        r.read(str(path), [(1, 10), (50, 10)])
        assert r.stats.bytes_requested == 20 and r.stats.bytes_read == 2 * 4096
        r.read(str(path), [(4090, 10), (9000, 1), (8192, 0)])  # pages 0-1, 2, none
        assert r.stats.bytes_read == 2 * 4096 + 3 * 4096


@given(
    st.lists(st.tuples(st.integers(0, 50_000), st.integers(0, 9_000)), max_size=12),
    st.sampled_from([64, 1000, 4096]),
)
def test_pages_of_ranges_counts_each_ranges_pages(ranges: list[tuple[int, int]], page: int) -> None:
    from headrace.io._mapped import pages_of_ranges

    offsets = np.array([o for o, _ in ranges], dtype=np.int64)
    lengths = np.array([n for _, n in ranges], dtype=np.int64)
    want = sum(len({b // page for b in range(o, o + n)}) for o, n in ranges) * page
    assert pages_of_ranges(offsets, lengths, page) == want


@given(
    st.lists(st.tuples(st.integers(0, 50_000), st.integers(0, 9_000)), max_size=12),
    st.sampled_from([64, 1000, 4096]),
)
def test_pages_touched_is_the_union_of_pages(ranges: list[tuple[int, int]], page: int) -> None:
    from headrace.io._mapped import pages_touched

    offsets = np.array([o for o, _ in ranges], dtype=np.int64)
    lengths = np.array([n for _, n in ranges], dtype=np.int64)
    pages = {b // page for o, n in ranges for b in range(o, o + n)}
    assert pages_touched(offsets, lengths, page) == len(pages) * page


@pytest.mark.parametrize("strategy", ALL)
def test_rows_and_ranges_past_int64_are_errors_not_other_bytes(data_file, strategy) -> None:
    # Offsets are int64: row 2**62 of 4 bytes wrapped to byte 0 and read row 0's bytes,
    # and a range ending past 2**63 - 1 came back empty from a map.
    path, _ = data_file
    p = str(path)
    big = 2**63 - 1
    with RangeReader(strategy) as r:  # type: ignore[arg-type]
        for rows, width in (
            (np.array([2**62]), 4),
            (np.array([2**63], dtype=np.uint64), 4),
            (np.array([0, 2**61 + 1]), 4),
            (np.array([big]), 1),
        ):
            with pytest.raises(ReadEOFError, match=r"is past the end of the file") as ei:
                r.read_rows(p, rows, width)
            assert p in str(ei.value) and str(FILE_BYTES) in str(ei.value)
        with pytest.raises(ReadEOFError, match=r"row 0 = bytes \[9223372036854775808, "):
            r.read_rows(p, [2**61], 4)
        with pytest.raises(ReadEOFError, match=r"row 0 .* base 9223372036854775800"):
            r.read_rows(p, [0], 16, base=big - 7)
        for ranges in ([(big - 1, 4)], [(0, 1), (2**62, 2**62)], np.array([[2**63, 1]], "u8")):
            with pytest.raises(
                ConfigError,
                match=r"Range \d+ is \(offset=\d+, length=\d+\); it "
                r"ends past byte 2\*\*63 - 1",
            ):
                r.read(p, ranges)
        assert r.read(p, [(FILE_BYTES, 0)])[0].size == 0  # at the end: still fine
