"""TokenBucket on a fake clock: exact waits, debt, refill capped at the burst."""

from __future__ import annotations

import pytest

from headrace.emulate import TokenBucket
from headrace.errors import ConfigError


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_burst_passes_then_debt_queues_callers_in_order():
    clock = Clock()
    b = TokenBucket(1000.0, 500.0, clock=clock)
    assert b.reserve(500) == 0.0
    assert b.reserve(1000) == pytest.approx(1.0)
    assert b.reserve(1000) == pytest.approx(2.0)  # queued behind the first debt


def test_refill_is_capped_at_the_burst():
    clock = Clock()
    b = TokenBucket(1000.0, 500.0, clock=clock)
    clock.t += 3600
    assert b.reserve(500) == 0.0
    assert b.reserve(100) == pytest.approx(0.1)


def test_debt_is_paid_back_by_elapsed_time():
    clock = Clock()
    b = TokenBucket(1000.0, 0.0, clock=clock)
    assert b.reserve(2000) == pytest.approx(2.0)
    clock.t += 2.0
    assert b.reserve(0) == 0.0
    assert b.reserve(1000) == pytest.approx(1.0)


def test_long_run_rate_is_exact():
    clock = Clock()
    b = TokenBucket(1e6, 128 * 1024, clock=clock)
    sent = 0
    for _ in range(1000):
        clock.t += b.reserve(4096)  # a caller that sleeps exactly as told
        sent += 4096
    assert sent <= 1e6 * (clock.t - 100.0) + 128 * 1024


@pytest.mark.parametrize(
    ("rate", "burst"), [(0.0, 1.0), (-1.0, 1.0), (float("inf"), 1.0), (1.0, -1.0)]
)
def test_bad_rate_or_burst_is_refused(rate, burst):
    with pytest.raises(ConfigError, match="TokenBucket"):
        TokenBucket(rate, burst)


def test_negative_reservation_is_refused():
    with pytest.raises(ConfigError, match="nbytes >= 0"):
        TokenBucket(1.0, 1.0).reserve(-1)
