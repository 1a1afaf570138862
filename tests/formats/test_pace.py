"""Pace: storage round trips one after another while quick, many at a time once slow."""

from __future__ import annotations

import threading
import time

import pytest

from headrace.formats._pace import Pace


def _run(pace: Pace, delays: list[float]) -> set[int]:
    """The threads ``pace`` ran items on, each item sleeping its delay; checks order."""
    threads: set[int] = set()

    def item(k: int) -> int:
        threads.add(threading.get_ident())
        time.sleep(delays[k])
        return k

    assert list(pace.map(item, range(len(delays)))) == list(range(len(delays)))
    return threads


def test_quick_items_stay_in_this_thread_and_slow_ones_go_to_threads() -> None:
    # (Times far apart: a loaded machine's pauses are not a mount's round trips.)
    here = {threading.get_ident()}
    pace = Pace(20e-3)
    assert _run(pace, [0.0] * 50) == here and not pace.slow
    # Two in a row over 20 ms (a mount's round trips): the rest on many threads.
    assert len(_run(pace, [50e-3] * 40)) > 2 and pace.slow
    # And from then on, without recover.
    assert here not in _run(pace, [0.0] * 40) and pace.slow


def test_one_hiccup_does_not_send_the_rest_to_threads() -> None:
    # A page fault storm or a pause slows one item, not two in a row.
    pace = Pace(20e-3)
    delays = [0.0] * 30
    delays[3] = delays[17] = 50e-3
    assert _run(pace, delays) == {threading.get_ident()} and not pace.slow


def test_allow_gives_big_items_their_time() -> None:
    pace = Pace(20e-3, allow=lambda k: 200e-3)  # each result accounts for 200 ms
    assert _run(pace, [50e-3] * 4) == {threading.get_ident()} and not pace.slow


@pytest.mark.parametrize("quick_again", [True, False])
def test_recover_comes_back_once_a_map_holds_a_quick_item(quick_again: bool) -> None:
    pace = Pace(20e-3, recover=True)
    _run(pace, [50e-3] * 20)
    assert pace.slow
    # The page cache has the data now: a map of quick items (run on threads, each
    # timed there) brings the next map back to this thread.
    _run(pace, [0.0 if quick_again else 50e-3] * 20)
    assert pace.slow is not quick_again


def test_the_first_error_in_order_is_raised_on_threads_too() -> None:
    pace = Pace(20e-3)

    def item(k: int) -> int:
        time.sleep(50e-3 if k != 12 else 150e-3)
        if k in (12, 30):
            raise OSError(k, "failed")
        return k

    with pytest.raises(OSError) as got:
        list(pace.map(item, range(40)))
    assert got.value.errno == 12 and pace.slow  # 30 failed sooner, on another thread
