"""A token bucket that hands out waits instead of sleeping, so callers sleep unlocked."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

from headrace.errors import ConfigError

__all__ = ["TokenBucket"]


class TokenBucket:
    """Shares ``rate`` bytes per second among all callers, with a burst of ``burst`` bytes.

    :meth:`reserve` takes its tokens at once, even when that leaves the bucket in
    debt, and returns how long the caller must wait before using them. Debt is
    what makes it fair and exact: a request larger than the burst still passes,
    later callers queue behind the debt in arrival order, and over any long
    interval no more than ``rate * t + burst`` bytes are released.
    """

    __slots__ = ("_clock", "_lock", "_stamp", "_tokens", "burst", "rate")

    def __init__(
        self,
        rate: float,
        burst: float,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not (math.isfinite(rate) and rate > 0):
            raise ConfigError(f"TokenBucket rate must be > 0 bytes/s (got {rate!r}).")
        if not (math.isfinite(burst) and burst >= 0):
            raise ConfigError(f"TokenBucket burst must be >= 0 bytes (got {burst!r}).")
        self.rate = float(rate)
        self.burst = float(burst)
        self._clock = clock
        self._lock = threading.Lock()
        self._tokens = self.burst
        self._stamp = clock()

    def reserve(self, nbytes: int) -> float:
        """Take ``nbytes`` tokens; return the seconds to wait before sending them."""
        if nbytes < 0:
            raise ConfigError(f"TokenBucket.reserve needs nbytes >= 0 (got {nbytes}).")
        with self._lock:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.rate)
            self._stamp = now
            self._tokens -= nbytes
            return 0.0 if self._tokens >= 0 else -self._tokens / self.rate
