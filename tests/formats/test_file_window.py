"""FetchWindow: at most ``depth`` files held or fetching, whatever the plan does."""

from __future__ import annotations

import threading

from headrace.formats._file_window import FetchWindow


def test_fetches_dropped_in_flight_keep_their_slots_until_they_end() -> None:
    gates = {f: threading.Event() for f in range(6)}

    def fetch(f: int) -> bytes:
        assert gates[f].wait(10)
        return bytes(100)

    w = FetchWindow(fetch, 2)
    w.plan([0, 1])
    w.retain(set())  # a read that jumped elsewhere: 0 and 1 dropped, still in flight
    w.plan([2, 3])
    # Before, 2 and 3 started at once: 4 fetches in flight (and held) for a depth of 2.
    assert w.queued == [2, 3]
    gates[0].set()
    gates[1].set()
    gates[2].set()
    gates[3].set()
    assert w.take(2) == bytes(100) and w.take(3) == bytes(100)
    assert w.stats.max_in_flight_observed <= 2
    assert w.stats.held_bytes == 200 <= w.stats.peak_held_bytes <= 200
    w.close()
    assert w.stats.held_bytes == 0
