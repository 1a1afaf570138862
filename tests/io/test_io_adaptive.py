"""The adaptive policy, driven by a fake clock and a latency-injecting file."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

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
    """A real LocalFile whose reads cost fake time: per mapped read, per positional read."""

    mapped_s = 0.0
    pread_s = 0.0
    clock: FakeClock

    @property
    def mapped(self):  # type: ignore[override]
        self.clock.advance(self.mapped_s)
        return super().mapped

    def pread_into(self, buf, offset):  # type: ignore[override]
        self.clock.advance(self.pread_s)
        super().pread_into(buf, offset)


@pytest.fixture
def slow(tmp_path: Path):
    data = np.random.default_rng(3).integers(0, 256, 1 << 20, dtype=np.uint8)
    path = tmp_path / "rows.bin"
    path.write_bytes(data.tobytes())
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

    def read() -> str:
        """One read; returns the mode it used. Bytes are always checked."""
        before = dict(reader.stats.reads_by_mode)
        got = reader.read_rows(str(path), rows, width)
        expect = data.reshape(1024, width)[rows]
        assert np.array_equal(got, expect)
        after = reader.stats.reads_by_mode
        (used,) = [m for m in after if after[m] != before.get(m, 0)]
        return used

    def set_latency(mapped_s: float, pread_per_span_s: float) -> None:
        SlowFile.mapped_s = mapped_s
        SlowFile.pread_s = pread_per_span_s

    yield reader, read, set_latency
    reader.close()
    SlowFile.mapped_s = SlowFile.pread_s = 0.0


def test_switches_on_slow_read_probes_and_returns_when_fast(slow) -> None:
    reader, read, set_latency = slow
    # Cold, slow storage: a mapped read takes 50 ms; a parallel read 8 x 0.25 ms.
    set_latency(0.050, 0.00025)
    assert read() == "mmap"
    assert reader.stats.current_mode == "pread" and reader.stats.mode_switches == 1
    used = [read() for _ in range(40)]
    # Parallel stays while cheaper; the 32nd read after the switch probes mmap.
    assert used.count("mmap") == 1 and used.index("mmap") == 31
    assert reader.stats.current_mode == "pread" and reader.stats.probes == 1
    # The cache warms: mapped reads now take 0.1 ms. The next probe notices.
    set_latency(0.0001, 0.00025)
    used = [read() for _ in range(40)]
    first_probe = used.index("mmap")
    assert first_probe < 32
    assert set(used[first_probe:]) == {"mmap"} or used[first_probe:].count("pread") == 1
    assert reader.stats.current_mode == "mmap"
    assert reader.stats.mode_switches == 2
    # While fast, mapped stays, apart from a parallel probe every 32 reads.
    used = [read() for _ in range(64)]
    assert used.count("pread") == 2 and reader.stats.current_mode == "mmap"
    s = reader.stats
    assert s.reads == sum(s.reads_by_mode.values()) == 1 + 40 + 40 + 64
    assert s.seconds_by_mode["mmap"] > 0 and s.seconds_by_mode["pread"] > 0


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
