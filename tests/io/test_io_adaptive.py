"""The adaptive policy, driven by a fake clock and a latency-injecting file."""

from __future__ import annotations

import threading
from mmap import PAGESIZE
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

from headrace.errors import ConfigError
from headrace.io import AdaptivePolicy, LocalFile, RangeReader, ReaderConfig
from headrace.io._adaptive import AdaptiveState


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self._lock = threading.Lock()

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.now += seconds


class SlowFile(LocalFile):
    """A real LocalFile whose reads cost fake time: per mapped read, per positional read
    of a span, and per row read alone (the adaptive check's sample). ``resident_rows``
    overrides what mincore says (``None``: ask it; the test file is page cached)."""

    mapped_s = 0.0
    pread_s = 0.0
    row_s = 0.0
    resident_rows: bool | None = None
    sampled: ClassVar[list[tuple[int, int]]] = []
    clock: FakeClock

    @property
    def mapped(self):  # type: ignore[override]
        self.clock.advance(self.mapped_s)
        return super().mapped

    def pread_into(self, buf, offset):  # type: ignore[override]
        self.clock.advance(self.pread_s)
        super().pread_into(buf, offset)

    def pread(self, offset, length):  # type: ignore[override]
        self.clock.advance(self.row_s)
        SlowFile.sampled.append((offset, length))
        out = np.empty(length, dtype=np.uint8)
        LocalFile.pread_into(self, out, offset)
        return out

    def resident(self, offsets, lengths):  # type: ignore[override]
        if SlowFile.resident_rows is None:
            return super().resident(offsets, lengths)
        return np.full(len(offsets), SlowFile.resident_rows)


@pytest.fixture
def slow(tmp_path: Path):
    data = np.random.default_rng(3).integers(0, 256, 1 << 20, dtype=np.uint8)
    path = tmp_path / "rows.bin"
    path.write_bytes(data.tobytes())
    (tmp_path / "other.bin").write_bytes(data.tobytes())
    clock = FakeClock()
    files: list[SlowFile] = []

    def opener(p: str) -> SlowFile:
        f = SlowFile(p)
        f.clock = clock
        files.append(f)
        return f

    # Threads: SlowFile charges its fake latency in pread_into, which io_uring bypasses.
    cfg = ReaderConfig(strategy="adaptive", in_flight=8, engine="threads")
    reader = RangeReader(cfg, clock=clock, opener=opener)
    rows = np.arange(0, 1024, 128)  # 8 rows 128 KiB apart: beyond max_gap, so 8 spans
    width = 1024

    def read(name: str = "rows.bin") -> str:
        """One read; returns the mode it used. Bytes are always checked."""
        before = dict(reader.stats.reads_by_mode)
        got = reader.read_rows(str(tmp_path / name), rows, width)
        expect = data.reshape(1024, width)[rows]
        assert np.array_equal(got, expect)
        after = reader.stats.reads_by_mode
        (used,) = [m for m in after if after[m] != before.get(m, 0)]
        return used

    def set_latency(mapped_s: float, pread_per_span_s: float, row_s: float = 0.0) -> None:
        SlowFile.mapped_s = mapped_s
        SlowFile.pread_s = pread_per_span_s
        SlowFile.row_s = row_s

    yield reader, read, set_latency
    reader.close()
    SlowFile.mapped_s = SlowFile.pread_s = SlowFile.row_s = 0.0
    SlowFile.resident_rows = None
    SlowFile.sampled.clear()


def test_switches_on_slow_read_probes_backs_off_and_returns_when_fast(slow) -> None:
    reader, read, set_latency = slow
    # Slow storage, pages cached (so the first mapped read is not declined): a
    # mapped read takes 50 ms; a parallel read 8 x 0.25 ms.
    set_latency(0.050, 0.00025)
    assert read() == "mmap"
    assert reader.stats.current_mode == "pread" and reader.stats.mode_switches == 1
    used = [read() for _ in range(100)]
    # Parallel stays while cheaper; the 32nd read after the switch probes mmap,
    # which loses, so the next probe comes 64 reads later.
    assert [i for i, m in enumerate(used) if m == "mmap"] == [31, 95]
    assert reader.stats.current_mode == "pread" and reader.stats.probes == 2
    # The cache warms: mapped reads now take 0.1 ms. The next probe (128 reads
    # after the last) notices, and mapped reads stay.
    set_latency(0.0001, 0.00025)
    used = [read() for _ in range(130)]
    first_probe = used.index("mmap")
    assert first_probe == 127 - 4  # 4 of the 128 were read above
    assert set(used[first_probe:]) == {"mmap"}
    assert reader.stats.current_mode == "mmap" and reader.stats.mode_switches == 2
    # While fast, mapped stays, apart from a parallel probe 32 reads after the
    # switch, then 64, 128, 256, 256 ... as each parallel probe loses.
    since = len(used) - 1 - first_probe  # reads since the switch
    used = [read() for _ in range(32 + 64 + 128 + 256 + 256)]
    probes = [i + since + 1 for i, m in enumerate(used) if m == "pread"]
    assert probes == [32, 32 + 64, 32 + 64 + 128, 32 + 64 + 128 + 256, 32 + 64 + 128 + 512]
    assert reader.stats.current_mode == "mmap"
    s = reader.stats
    assert s.reads == sum(s.reads_by_mode.values()) == 1 + 100 + 130 + 736
    assert s.seconds_by_mode["mmap"] > 0 and s.seconds_by_mode["pread"] > 0
    # Every mapped probe checked residency first (all resident here), as did the
    # file's first read; none was declined.
    assert (s.mapped_checks, s.mapped_declined) == (4, 0)


def test_a_cold_slow_file_costs_one_row_read_not_a_mapped_walk(slow) -> None:
    reader, read, set_latency = slow
    SlowFile.resident_rows = False
    # A mapped read would cost 50 ms; a row read alone 20 ms: 8 missing rows
    # would take ~160 ms mapped, over 10 ms, so the read is made in parallel.
    set_latency(0.050, 0.00025, row_s=0.020)
    assert read() == "pread"
    s = reader.stats
    assert s.current_mode == "pread" and s.mode_switches == 1
    assert (s.mapped_checks, s.mapped_declined) == (1, 1)
    assert s.reads_by_mode == {"pread": 1}
    # The policy saw the estimate (8 x 20 ms) as the mapped cost, not the
    # 50 ms charged for looking at the map, and the parallel read's own cost.
    st = reader._adaptive
    assert st.cost["mmap"] == pytest.approx(0.020)
    assert st.cost["pread"] == pytest.approx(8 * 0.00025 / 8)
    # Probes are checked the same way: declined, so no mapped read is ever
    # made, and they back off (32, then 64 reads later).
    used = [read() for _ in range(100)]
    assert set(used) == {"pread"}
    s = reader.stats
    assert s.probes == 2 and (s.mapped_checks, s.mapped_declined) == (3, 3)
    assert s.mode_switches == 1 and s.current_mode == "pread"
    # The cache warms (mincore now says resident): the next probe reads mapped,
    # fast, and returns to mapped reads.
    SlowFile.resident_rows = True
    set_latency(0.0001, 0.00025, row_s=0.020)
    used = [read() for _ in range(128)]
    assert used.index("mmap") == 127 - 4
    assert reader.stats.current_mode == "mmap" and reader.stats.mode_switches == 2


def test_missing_rows_on_fast_storage_are_read_mapped(slow) -> None:
    reader, read, set_latency = slow
    # Not resident (or mincore cannot tell: a file we may not write reads as
    # missing), but a row alone takes 0.1 ms: 8 rows ~0.8 ms mapped, fast.
    SlowFile.resident_rows = False
    set_latency(0.0001, 0.00025, row_s=0.0001)
    assert read() == "mmap"
    s = reader.stats
    assert (s.mapped_checks, s.mapped_declined) == (1, 0) and s.current_mode == "mmap"
    # Later mapped reads of the same file are not checked; another file's first is.
    assert [read() for _ in range(3)] == ["mmap"] * 3
    assert reader.stats.mapped_checks == 1
    assert read("other.bin") == "mmap"
    assert reader.stats.mapped_checks == 2


def test_a_long_missing_range_samples_one_page_and_counts_a_fault_per_128_kib(
    slow, tmp_path: Path
) -> None:
    reader, _, set_latency = slow
    SlowFile.resident_rows = False
    # One 900 kB range (a row window), bytes [5000, 905000): mapped, it faults
    # once per 128 KiB of read-around it spans, 7 times; the check reads its
    # first 128 KiB, not all of it.
    set_latency(0.0, 0.0, row_s=0.002)  # 7 x 2 ms = 14 ms: slow
    data = (tmp_path / "rows.bin").read_bytes()
    (got,) = reader.read(str(tmp_path / "rows.bin"), [(5000, 900_000)])
    assert got.tobytes() == data[5000:905000]
    assert SlowFile.sampled == [(5000, 128 << 10)]
    s = reader.stats
    assert (s.mapped_checks, s.mapped_declined) == (1, 1) and s.reads_by_mode == {"pread": 1}
    assert reader._adaptive.cost["mmap"] == pytest.approx(7 * 0.002)


def test_a_long_missing_range_on_fast_storage_is_read_mapped(slow, tmp_path: Path) -> None:
    reader, _, set_latency = slow
    SlowFile.resident_rows = False
    set_latency(0.0, 0.0, row_s=0.001)  # 7 faults x 1 ms = 7 ms: under 10 ms
    data = (tmp_path / "rows.bin").read_bytes()
    (got,) = reader.read(str(tmp_path / "rows.bin"), [(5000, 900_000)])
    assert got.tobytes() == data[5000:905000]
    s = reader.stats
    assert (s.mapped_checks, s.mapped_declined) == (1, 0) and s.reads_by_mode == {"mmap": 1}
    assert len(SlowFile.sampled) == 1


def test_the_sample_is_a_row_with_bytes_not_an_empty_one(slow, tmp_path: Path) -> None:
    reader, _, set_latency = slow
    # mincore cannot tell (an error, or no mincore): every row reads as missing,
    # the empty ones too. Timing an empty row's read times no storage at all (a
    # zero-byte pread returns at once), so it must not be the sample, nor a fault.
    SlowFile.resident_rows = False
    set_latency(0.0, 0.0, row_s=0.002)  # 8 rows with bytes x 2 ms = 16 ms: slow
    data = (tmp_path / "rows.bin").read_bytes()
    ranges = [(0, 0), *[(i * 100_000, 1000) for i in range(8)], (len(data), 0)]
    got = reader.read(str(tmp_path / "rows.bin"), ranges)
    assert [g.tobytes() for g in got] == [data[o : o + n] for o, n in ranges]
    assert SlowFile.sampled == [(0, 1000)]
    s = reader.stats
    assert (s.mapped_checks, s.mapped_declined) == (1, 1) and s.reads_by_mode == {"pread": 1}
    # A fault per page a row touches (the map is advised random), none for an empty row.
    pages = sum((o + n - 1) // PAGESIZE - o // PAGESIZE + 1 for o, n in ranges if n)
    assert pages > 8  # some rows straddle two pages
    assert reader._adaptive.cost["mmap"] == pytest.approx(pages * 0.002 / len(ranges))


def test_a_file_whose_rows_are_resident_is_read_mapped_without_a_sample(slow) -> None:
    reader, read, set_latency = slow
    SlowFile.resident_rows = True
    set_latency(0.0001, 0.00025, row_s=1.0)  # a sample would make it look slow
    assert read() == "mmap"
    s = reader.stats
    assert (s.mapped_checks, s.mapped_declined) == (1, 0) and s.current_mode == "mmap"
    assert SlowFile.sampled == []


def test_parallel_is_dropped_when_it_costs_more(slow) -> None:
    reader, read, set_latency = slow
    # Parallel starts cheap, then costs more than slow mapped reads.
    set_latency(0.050, 0.00025)
    read()
    assert reader.stats.current_mode == "pread"
    read()
    set_latency(0.020, 0.005)  # mapped 20 ms; parallel 8 x 5 ms = 40 ms
    used, modes = [], []
    for _ in range(70):
        used.append(read())
        modes.append(reader.stats.current_mode)
    # Mapped cost is known only from that one 50 ms read, so parallel (40 ms)
    # looks cheaper until the mapped probe 32 reads in refreshes it: then
    # parallel is abandoned, and its own probe 32 reads later confirms that.
    assert used[30] == "mmap" and modes[30] == "mmap"
    assert modes[:30] == ["pread"] * 30 and modes[30:] == ["mmap"] * 40
    assert used[31:].count("pread") == 1 and used[62] == "pread"


def test_policy_state_machine_directly() -> None:
    st = AdaptiveState(AdaptivePolicy(slow_read_s=0.010, probe_every=4))
    assert st.choose() == ("mmap", False)
    assert st.observe("mmap", 0.002, 10) is False  # fast: stay mapped
    assert st.choose() == ("mmap", False)
    assert st.observe("mmap", 0.020, 10) is True  # slow: try parallel
    assert st.mode == "pread"
    assert [st.choose() for _ in range(4)][-1] == ("mmap", True)  # probe every 4th read
    assert st.observe("mmap", 0.030, 10) is False  # still slow: keep parallel
    st.observe("pread", 0.001, 10)
    assert st.observe("pread", 0.100, 10) is True  # parallel now costs more per row
    assert st.mode == "mmap"
    # Mapped slow but parallel known dearer: stay mapped.
    assert st.observe("mmap", 0.020, 10) is False
    # A parallel probe that comes back cheaper wins while mapped reads are slow.
    st.observe("pread", 0.0001, 10)
    assert st.observe("pread", 0.0001, 10) is True and st.mode == "pread"
    # A fast mapped probe returns to mapped.
    assert st.observe("mmap", 0.001, 10) is True and st.mode == "mmap"
    assert st.observe("pread", 0.0, 0) is False  # zero rows does not divide by zero


def test_probes_back_off_while_they_lose_and_reset_after_a_switch() -> None:
    st = AdaptiveState(AdaptivePolicy(probe_every=4, max_probe_every=16))

    def probe_at() -> int:
        for i in range(1, 100):
            _mode, probe = st.choose()
            if probe:
                return i
        raise AssertionError("no probe")

    st.observe("mmap", 0.001, 10)
    gaps = []
    for _ in range(5):
        gaps.append(probe_at())
        assert st.observe("pread", 0.002, 10, probe=True) is False  # dearer: lost
    assert gaps == [4, 8, 16, 16, 16]
    # A switch resets it.
    assert st.observe("mmap", 0.050, 10) is True and st.mode == "pread"
    assert st.interval == 4 and probe_at() == 4
    # A probe that does not lose leaves the interval as it is.
    st = AdaptiveState(AdaptivePolicy(probe_every=4, max_probe_every=16))
    st.observe("mmap", 0.001, 10)
    st.interval = 8
    assert probe_at() == 8
    st.observe("pread", 0.0001, 10, probe=True)  # cheaper, but mapped reads are fast
    assert st.mode == "mmap" and st.interval == 8


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"slow_read_s": 0}, "slow_read_s"),
        ({"probe_every": 1}, "probe_every must be"),
        ({"probe_every": 64, "max_probe_every": 32}, "max_probe_every must be .* at least"),
        ({"max_probe_every": 2.5}, "max_probe_every"),
    ],
)
def test_policy_refuses_bad_settings(kwargs, match) -> None:
    with pytest.raises(ConfigError, match=match):
        AdaptivePolicy(**kwargs)
