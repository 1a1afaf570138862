"""The latency proxy's in-flight count across a reset of its counters: a request in
flight at the reset was counted out of the new counters, which went below zero (-7
after a test whose stalled requests outlived it: the next test read max_in_flight 1 for
4 ranges listed at once, and CI failed on it, 2026-12-07)."""

from __future__ import annotations

import threading
import time

import pytest
from s3util import StoreFactory

from headrace.emulate import LatencyProxy

pytestmark = pytest.mark.integration


def test_a_request_in_flight_at_a_reset_is_counted_out_of_the_counters_it_was_in(
    proxy: LatencyProxy, open_store: StoreFactory
) -> None:
    store = open_store(proxy.endpoint)
    proxy.latency_ms = 400.0
    try:
        reader = threading.Thread(target=store.get_range, args=("big.bin", 0, 10))
        reader.start()
        deadline = time.monotonic() + 10
        while proxy.stats.in_flight == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert proxy.stats.in_flight == 1
        proxy.reset_stats()
        reader.join(10)
    finally:
        proxy.latency_ms = 0.0
    assert _settled(proxy) == 0  # was -1
    store.get_range("big.bin", 0, 10)
    assert _settled(proxy) == 0 and proxy.stats.max_in_flight == 1


def _settled(proxy: LatencyProxy) -> int:
    """The in-flight count once the proxy has finished its handlers (it counts a request
    out after writing the response, which the client may have read already)."""
    deadline = time.monotonic() + 10
    while proxy.stats.in_flight > 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    return proxy.stats.in_flight
