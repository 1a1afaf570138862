"""What an object store did: requests, tries, retries, bytes, latencies and throttling.

:class:`ObjectStats` is the snapshot :attr:`ObjectStore.stats` returns and the
bench adds up across stores; it holds counters only, so importing it needs no
``obstore``. The tries that fill it are counted in ``headrace.io._object_tries``.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field, fields, replace

__all__ = ["ObjectStats"]

_LATENCY_SAMPLES = 1 << 16


@dataclass(slots=True)
class ObjectStats:
    """What an :class:`ObjectStore` did since it opened (or :meth:`ObjectStore.reset_stats`).

    ``requests`` counts calls that succeeded (a ``get_ranges`` call is one,
    however many HTTP requests obstore made for it); ``attempts`` counts tries,
    and ``cancelled`` the tries cut short by :meth:`ObjectStore.close` (a loader's close
    cancels its read-ahead's GETs) or an interrupt, not failures of the store: so
    ``retries = attempts - requests - failures - cancelled``. ``latencies_s`` holds the
    latest 65,536 successful request latencies. ``throttled`` counts tries the
    store answered "slow down" (429, 503); ``in_flight_limit`` is the limit on
    tries in flight that those answers set (``None``: never throttled), and
    ``lowest_in_flight_limit`` its lowest value.
    """

    requests: int = 0
    attempts: int = 0
    retries: int = 0
    failures: int = 0
    cancelled: int = 0
    bytes: int = 0
    in_flight: int = 0
    max_in_flight_observed: int = 0
    throttled: int = 0
    in_flight_limit: float | None = None
    lowest_in_flight_limit: float | None = None
    latencies_s: deque[float] = field(default_factory=lambda: deque(maxlen=_LATENCY_SAMPLES))

    def __repr__(self) -> str:
        # The latencies summed up: printed whole (a log line of ``loader.stats`` or
        # ``source.object_stats``), a long run's 65,536 made a line of about 1.3 MB.
        counters = ", ".join(
            f"{f.name}={getattr(self, f.name)!r}" for f in fields(self) if f.name != "latencies_s"
        )
        return f"ObjectStats({counters}, latencies_s={_summary(self.latencies_s)})"

    def copy(self) -> ObjectStats:
        return replace(self, latencies_s=deque(self.latencies_s, maxlen=_LATENCY_SAMPLES))

    def add(self, other: ObjectStats) -> None:
        """Count ``other``'s requests in these (``max_in_flight_observed``: the larger)."""
        self.requests += other.requests
        self.attempts += other.attempts
        self.retries += other.retries
        self.failures += other.failures
        self.cancelled += other.cancelled
        self.bytes += other.bytes
        self.in_flight += other.in_flight
        self.max_in_flight_observed = max(self.max_in_flight_observed, other.max_in_flight_observed)
        self.throttled += other.throttled
        self.in_flight_limit = _lower(self.in_flight_limit, other.in_flight_limit)
        self.lowest_in_flight_limit = _lower(
            self.lowest_in_flight_limit, other.lowest_in_flight_limit
        )
        self.latencies_s.extend(other.latencies_s)


def _lower(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else min(a, b)


def _summary(latencies: deque[float]) -> str:
    """``<1,024 latest: median 12.1 ms, p99 80.3 ms, max 95.0 ms>``, or ``<none>``."""
    if not latencies:
        return "<none>"
    ordered = sorted(latencies)
    n = len(ordered)

    def ms(q: float) -> str:
        return f"{ordered[min(n - 1, int(q * n))] * 1e3:.1f} ms"

    return f"<{n:,} latest: median {ms(0.5)}, p99 {ms(0.99)}, max {ms(1.0)}>"
