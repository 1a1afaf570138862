"""Choosing between mapped and parallel positional reads by observed cost.

Mapped indexing costs nothing when pages are cached, but a page fault holds
the GIL, so on slow storage it reads one page at a time. Parallel positional
reads (coalesced, ``os.preadv`` on the I/O pool) keep many requests in flight
but pay thread hand-offs on every read. Which wins depends on the storage and
on how warm its cache is, so the reader measures instead of guessing:

* start mapped ("mmap");
* after a mapped read slower than ``slow_read_s``, switch to parallel
  ("pread") unless parallel is already known to cost more per row;
* stay parallel only while its per-row cost beats mapped reads' per-row cost;
* every ``probe_every`` reads, do one read in the other mode, so a warming
  (or cooling) cache is noticed; while the probed mode keeps losing, the
  interval doubles, up to ``max_probe_every`` reads, and it is
  ``probe_every`` again after a switch;
* a mapped probe that comes back fast returns to mapped reads.

A mapped read that may fault is looked at first (the reader does this for the
first mapped read of each file and for every mapped probe): rows whose pages
are all resident (``mincore``) cost no I/O; the first missing row (up to
128 KiB of it) is read alone and timed, and if that time, once per fault the
missing rows would take (one a page they lie on, a page shared by rows once;
one per 128 KiB of a long row), would exceed ``slow_read_s``
(:meth:`AdaptivePolicy.mapped_too_slow`), the read is made in parallel instead
and the estimate is observed as the mapped read's cost. So a mapped probe on
slow storage costs one round trip, not a serial walk over the whole batch; the
rules above are unchanged, they see an estimate.

On a network or FUSE mount the estimate overstates a mapped read, which
asks for all its pages before it waits for any (``_mapped.populate_ranges``):
1,024 cold rows through slowfs at 2 ms a READ were estimated at 4.8 ms a row,
measured at 0.12-0.18 ms, as parallel reads. The check is kept there: timing
real mapped probes instead made the reader switch back and forth, and a mapped
read right after parallel ones cost 2-4x a steady one (238 against 282
batches/s, 2026-12-07); with the two modes even there, parallel is kept.

Per-row costs are exponentially smoothed (half weight to the newest). The
policy sees only timings and only chooses *how* to read: the bytes are the
same either way. It is pure (no clock, no I/O) so tests drive it directly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from headrace.errors import ConfigError
from headrace.io._ranges import whole_number

__all__ = ["AdaptivePolicy", "AdaptiveState"]

MAPPED = "mmap"
PARALLEL = "pread"


@dataclass(frozen=True, kw_only=True, slots=True)
class AdaptivePolicy:
    """When the adaptive strategy switches modes, and how often it probes the other one."""

    slow_read_s: float = 0.010
    probe_every: int = 32
    max_probe_every: int = 256

    def __post_init__(self) -> None:
        s = self.slow_read_s
        if not (_real(s) and 0 < s < math.inf):
            raise ConfigError(f"slow_read_s must be a positive number of seconds (got {s!r}).")
        if not whole_number(self.probe_every) or self.probe_every < 2:
            raise ConfigError(
                f"probe_every must be an integer of at least 2 (got {self.probe_every!r})."
            )
        if not whole_number(self.max_probe_every) or self.max_probe_every < self.probe_every:
            raise ConfigError(
                f"max_probe_every must be an integer of at least probe_every = "
                f"{self.probe_every} (got {self.max_probe_every!r})."
            )
        # NumPy numbers (computed settings) as Python's.
        object.__setattr__(self, "slow_read_s", float(s))
        object.__setattr__(self, "probe_every", int(self.probe_every))
        object.__setattr__(self, "max_probe_every", int(self.max_probe_every))

    def mapped_too_slow(self, fault_s: float, faults: int) -> bool:
        """Would a mapped read that faults ``faults`` times, one after another,
        each like the one timed (``fault_s``), be slower than ``slow_read_s``?"""
        return fault_s * faults > self.slow_read_s


def _real(v: object) -> bool:
    """A real number (a NumPy one too), not a bool: ``True`` is no number of seconds."""
    return not isinstance(v, bool) and isinstance(v, int | float | np.integer | np.floating)


class AdaptiveState:
    """The policy's memory: current mode, per-row costs, reads since a probe.

    Not thread-safe on its own; the reader serialises ``choose``/``observe``.
    """

    __slots__ = ("_since", "cost", "interval", "last_mapped_slow", "mode", "policy")

    def __init__(self, policy: AdaptivePolicy) -> None:
        self.policy = policy
        self.mode = MAPPED
        self.cost: dict[str, float | None] = {MAPPED: None, PARALLEL: None}
        self.last_mapped_slow = False
        self.interval = policy.probe_every
        self._since = 0

    def choose(self) -> tuple[str, bool]:
        """The mode for the next read, and whether that read is a probe."""
        self._since += 1
        if self._since >= self.interval:
            self._since = 0
            return (PARALLEL if self.mode == MAPPED else MAPPED), True
        return self.mode, False

    def observe(self, used: str, seconds: float, rows: int, *, probe: bool = False) -> bool:
        """Record a read made in mode ``used``; return whether the mode changed.

        ``probe``: the read was a probe of the other mode; if it lost (its
        per-row cost is no lower than the current mode's), probes back off.
        """
        per_row = seconds / max(rows, 1)
        old = self.cost[used]
        self.cost[used] = per_row if old is None else 0.5 * (old + per_row)
        slow = seconds > self.policy.slow_read_s
        if used == MAPPED:
            self.last_mapped_slow = slow
        mapped, parallel = self.cost[MAPPED], self.cost[PARALLEL]
        new = self.mode
        if self.mode == MAPPED:
            if self.last_mapped_slow and (
                parallel is None or (mapped is not None and parallel < mapped)
            ):
                new = PARALLEL
        elif used == MAPPED and not slow:
            new = MAPPED  # a fast mapped probe: the cache has warmed
        elif mapped is not None and parallel is not None and mapped <= parallel:
            new = MAPPED  # parallel no longer pays for its overhead
        if new == self.mode:
            if probe and used != self.mode:
                probed, current = self.cost[used], self.cost[self.mode]
                if probed is not None and current is not None and probed >= current:
                    self.interval = min(2 * self.interval, self.policy.max_probe_every)
            return False
        self.mode = new
        self._since = 0
        self.interval = self.policy.probe_every
        return True
