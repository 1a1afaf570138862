"""Counters a reader keeps, and the snapshot it hands out."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

__all__ = ["ReadStats"]


@dataclass(frozen=True, kw_only=True, slots=True)
class ReadStats:
    """A snapshot of one reader's work since it was opened.

    ``bytes_read`` counts bytes fetched from storage: spans with their gaps
    for positional reads, aligned blocks for O_DIRECT, and the pages each
    requested range lies on for mapped reads (what their page faults read at
    least, per range: the kernel's read-around is invisible from here).
    A *read* is one call (``read``, ``read_into`` or ``read_rows``); a *row*
    is one requested range. ``engine`` is the engine of the latest
    positional read (``"uring"`` or ``"threads"``; ``""`` before any), and
    ``reads_by_engine`` counts positional reads per engine.

    The adaptive strategy's decisions: ``current_mode``, ``mode_switches``,
    ``probes`` (reads made in the other mode to compare), ``mapped_checks``
    (mapped reads that first asked which rows are resident and timed one
    missing row read alone) and ``mapped_declined`` (of those, the reads made in
    parallel instead because the estimate was slow).
    """

    reads: int = 0
    rows: int = 0
    bytes_requested: int = 0
    bytes_read: int = 0
    mode_switches: int = 0
    probes: int = 0
    mapped_checks: int = 0
    mapped_declined: int = 0
    current_mode: str = ""
    reads_by_mode: dict[str, int] = field(default_factory=dict)
    seconds_by_mode: dict[str, float] = field(default_factory=dict)
    engine: str = ""
    reads_by_engine: dict[str, int] = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        return sum(self.seconds_by_mode.values())


class StatsRecorder:
    """The mutable side of :class:`ReadStats`, safe to update from many threads."""

    def __init__(self, mode: str) -> None:
        self._lock = threading.Lock()
        self._reads = self._rows = self._requested = self._read = 0
        self._switches = self._probes = self._checks = self._declined = 0
        self._mode = mode
        self._reads_by: dict[str, int] = {}
        self._seconds_by: dict[str, float] = {}
        self._engine = ""
        self._by_engine: dict[str, int] = {}

    def record(
        self, *, mode: str, rows: int, requested: int, read: int, seconds: float, engine: str
    ) -> None:
        with self._lock:
            if engine:
                self._engine = engine
                self._by_engine[engine] = self._by_engine.get(engine, 0) + 1
            self._reads += 1
            self._rows += rows
            self._requested += requested
            self._read += read
            self._reads_by[mode] = self._reads_by.get(mode, 0) + 1
            self._seconds_by[mode] = self._seconds_by.get(mode, 0.0) + seconds

    def policy(self, *, current_mode: str, switched: int, probe: bool) -> None:
        with self._lock:
            self._mode = current_mode
            self._switches += switched
            self._probes += probe

    def checked(self, *, declined: bool) -> None:
        with self._lock:
            self._checks += 1
            self._declined += declined

    def snapshot(self) -> ReadStats:
        with self._lock:
            return ReadStats(
                reads=self._reads,
                rows=self._rows,
                bytes_requested=self._requested,
                bytes_read=self._read,
                mode_switches=self._switches,
                probes=self._probes,
                mapped_checks=self._checks,
                mapped_declined=self._declined,
                current_mode=self._mode,
                reads_by_mode=dict(self._reads_by),
                seconds_by_mode=dict(self._seconds_by),
                engine=self._engine,
                reads_by_engine=dict(self._by_engine),
            )
