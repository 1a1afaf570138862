"""The adaptive policy on a network mount, where a mapped read populates its pages
with every run asked for first: one round trip for many rows, not a fault per page,
and the check before a mapped read is kept all the same (measured: docs/io.md).

Driven by a fake clock and a latency-injecting file on real bytes: no timing asserts,
only the decisions made given the injected costs.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from headrace.io import LocalFile, RangeReader, ReaderConfig


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self._lock = threading.Lock()

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.now += seconds


class NetworkFile(LocalFile):
    """A real LocalFile said to lie on a network mount, whose pages are not resident
    and whose reads cost fake time: ``mapped_s`` per mapped read (its populate, all
    runs in flight at once), ``pread_s`` per positional read of a span, ``row_s`` per
    row read alone (the adaptive check's sample, which assumes faults in series)."""

    mapped_s = 0.0
    pread_s = 0.0
    row_s = 0.0
    clock: FakeClock

    @property
    def network(self) -> bool:  # type: ignore[override]
        return True

    @property
    def mapped(self):  # type: ignore[override]
        self.clock.advance(self.mapped_s)
        return super().mapped

    def pread_into(self, buf, offset):  # type: ignore[override]
        self.clock.advance(self.pread_s)
        super().pread_into(buf, offset)

    def pread(self, offset, length):  # type: ignore[override]
        self.clock.advance(self.row_s)
        out = np.empty(length, dtype=np.uint8)
        LocalFile.pread_into(self, out, offset)
        return out

    def resident(self, offsets, lengths):  # type: ignore[override]
        return np.zeros(len(offsets), dtype=bool)  # cold: every row missing


@pytest.fixture
def mount(tmp_path: Path):
    data = np.random.default_rng(51).integers(0, 256, 1 << 20, dtype=np.uint8)
    path = tmp_path / "rows.bin"
    path.write_bytes(data.tobytes())
    clock = FakeClock()

    def opener(p: str) -> NetworkFile:
        f = NetworkFile(p)
        f.clock = clock
        return f

    # Threads: the fake latency is charged in pread_into, which io_uring bypasses.
    cfg = ReaderConfig(strategy="adaptive", in_flight=8, engine="threads")
    reader = RangeReader(cfg, clock=clock, opener=opener)
    rows = np.arange(0, 1024, 128)  # 8 rows of 1 KiB, 128 KiB apart: 8 spans, 8 pages
    width = 1024

    def read() -> str:
        """One read; returns the mode it used. The bytes are always checked."""
        before = dict(reader.stats.reads_by_mode)
        got = reader.read_rows(str(path), rows, width)
        assert np.array_equal(got, data.reshape(1024, width)[rows])
        after = reader.stats.reads_by_mode
        (used,) = [m for m in after if after[m] != before.get(m, 0)]
        return used

    def set_latency(mapped_s: float, pread_per_span_s: float, row_s: float) -> None:
        NetworkFile.mapped_s = mapped_s
        NetworkFile.pread_s = pread_per_span_s
        NetworkFile.row_s = row_s

    yield reader, read, set_latency
    reader.close()
    NetworkFile.mapped_s = NetworkFile.pread_s = NetworkFile.row_s = 0.0


def test_on_a_mount_a_mapped_probe_costs_a_row_read_not_a_mapped_read(mount) -> None:
    """On a mount a populated mapped read is about one round trip, so the check's
    estimate (row time x faults in series) overstates it (~30x through slowfs), yet
    the check is kept there: measured, timing real mapped reads instead made the
    reader switch back and forth, and a mapped read right after parallel ones cost
    2-4x a steady one: 238 against 282 batches/s (docs/io.md, 2026-12-07)."""
    reader, read, set_latency = mount
    # A row alone 2 ms, 8 faults in series 16 ms (over 10 ms): declined, although
    # the populated mapped read would take 3 ms; parallel reads cost 8 x 1 ms.
    set_latency(0.003, 0.001, row_s=0.002)
    used = [read() for _ in range(41)]
    assert set(used) == {"pread"}
    s = reader.stats
    # The first read and the mapped probe 32 reads after the switch were checked,
    # each costing one row read alone, and both made in parallel.
    assert s.current_mode == "pread" and s.mode_switches == 1 and s.probes == 1
    assert (s.mapped_checks, s.mapped_declined) == (2, 2)
    st = reader._adaptive
    assert st.cost["mmap"] == pytest.approx(0.002)  # the estimate: 8 x 2 ms / 8 rows
    assert st.cost["pread"] == pytest.approx(0.001)
