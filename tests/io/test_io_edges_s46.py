"""Edge cases of the range-read engine found in a storage review (s46)."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from _cold import FakeClock, cold_opener
from headrace.errors import ConfigError, ReadEOFError
from headrace.io import AdaptivePolicy, RangeReader, ReaderConfig


@pytest.fixture
def cold(tmp_path: Path):
    data = np.random.default_rng(46).integers(0, 256, 1 << 20, dtype=np.uint8)
    path = tmp_path / "rows.bin"
    path.write_bytes(data.tobytes())
    clock = FakeClock()
    opener = cold_opener(clock)

    cfg = ReaderConfig(
        strategy="adaptive",
        engine="threads",
        in_flight=4,
        policy=AdaptivePolicy(probe_every=2, max_probe_every=2),
    )
    with RangeReader(cfg, clock=clock, opener=opener) as reader:
        rows = np.arange(0, 1024, 128)  # 8 rows of 1 KiB: 8 faults x 5 ms > 10 ms

        def read() -> str:
            before = dict(reader.stats.reads_by_mode)
            got = reader.read_rows(str(path), rows, 1024)
            assert np.array_equal(got, data.reshape(1024, 1024)[rows])
            after = reader.stats.reads_by_mode
            (used,) = [m for m in after if after[m] != before.get(m, 0)]
            return used

        yield reader, str(path), read


@pytest.mark.parametrize("empty", [[], [(0, 0)], [(100, 0), (5000, 0)]])
def test_an_empty_first_read_leaves_the_file_unchecked(cold, empty) -> None:
    # A read of no bytes marked its file checked: the next read, of cold rows on slow
    # storage, then walked the map one fault at a time instead of being checked.
    reader, path, read = cold
    assert [bytes(a) for a in reader.read(path, empty)] == [b""] * len(empty)
    assert read() == "pread"  # checked, and declined: 8 faults x 5 ms
    s = reader.stats
    assert (s.mapped_checks, s.mapped_declined) == (1, 1)
    assert s.reads == 2 and s.current_mode == "pread"


@pytest.mark.parametrize("empty", [[], [(0, 0)], [(100, 0)]])
def test_an_empty_read_is_no_probe(cold, empty) -> None:
    # A read of no bytes, timed at ~0 s, counted as a fast mapped probe: the reader on
    # slow storage went back to mapped reads, and walked its next read's faults.
    reader, path, read = cold
    assert read() == "pread"
    assert read() == "pread"
    assert reader.stats.current_mode == "pread" and reader.stats.mode_switches == 1
    reader.read(path, empty)  # where the mapped probe was due (every 2nd read)
    s = reader.stats
    assert (s.current_mode, s.mode_switches, s.probes) == ("pread", 1, 0)
    # The probe is made by the next read that reads bytes: checked, and declined.
    assert read() == "pread"
    s = reader.stats
    assert (s.probes, s.mapped_checks, s.mapped_declined) == (1, 2, 2)
    assert s.current_mode == "pread" and s.reads == sum(s.reads_by_mode.values()) == 4


@pytest.mark.parametrize("strategy", ["mmap", "adaptive"])
def test_a_mapped_read_past_a_shrunk_end_names_the_range(tmp_path: Path, strategy) -> None:
    # The map's guard said "mapped read up to byte 900100 is past the end": the path and
    # an end byte, not which range (of the caller's) was past it.
    path = tmp_path / "t.bin"
    path.write_bytes(bytes(range(256)) * 4096)
    with RangeReader(ReaderConfig(strategy=strategy, engine="threads")) as r:
        r.read(str(path), [(0, 10), (900_000, 10)])  # maps the whole file
        path.write_bytes(bytes(range(256)) * 16)  # truncated in place to 4096 bytes
        with pytest.raises(ReadEOFError) as info:
            r.read(str(path), [(0, 10), (5, 5), (900_000, 100)])
        message = str(info.value)
        assert message.startswith(f"{path}: range 2 = bytes [900000, 900100) is past the end")
        assert "4096 bytes" in message and "1048576 bytes when opened" in message
        # Below the new end the file still reads, the same bytes as os.pread's.
        assert bytes(r.read(str(path), [(4000, 96)])[0]) == (bytes(range(256)) * 16)[4000:]


@pytest.mark.parametrize("engine", ["threads", "uring"])
def test_an_alignment_above_the_piece_size_reads_whole_blocks(tmp_path: Path, engine) -> None:
    # O_DIRECT splits spans into pieces of max(256 KiB, max_span) rounded down to the
    # alignment: an alignment above that rounded them to 0 bytes, a division by zero
    # (a RuntimeWarning, so an error under -W error) that read each span whole by luck.
    data = np.random.default_rng(7).integers(0, 256, (3 << 20) + 123, dtype=np.uint8)
    path = tmp_path / "d.bin"
    path.write_bytes(data.tobytes())
    cfg = ReaderConfig(strategy="odirect", engine=engine, alignment=1 << 20, max_span=512 << 10)
    ranges = [(600, 10), (3 << 20, 123), (1_000_000, 2_100_000), (5, 0)]
    with RangeReader(cfg) as r, warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            got = r.read(str(path), ranges)
        except ConfigError as exc:  # io_uring or O_DIRECT refused here
            pytest.skip(str(exc))
    assert [bytes(g) for g in got] == [data[o : o + n].tobytes() for o, n in ranges]
