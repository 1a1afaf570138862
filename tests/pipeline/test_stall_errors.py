"""Stall warnings made errors (-W error): raised by the wait, never swallowed.

The warnings themselves: test_stall.py and tests/integration/test_stall_warnings.py.
"""

from __future__ import annotations

import time
import warnings

import pytest

from headrace.pipeline._stall import StallWatch


def test_a_watched_wait_raises_the_warning_that_warnings_made_an_error() -> None:
    # Without read-ahead the read runs in the waiting thread, and the watcher thread
    # warns for it; under -W error that warning is raised by the wait once it ends, as
    # read-ahead's waiting next() raises it (it was swallowed, and the arrival line
    # raised in its place).
    watch = StallWatch(0.05, lambda: 7)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(RuntimeWarning, match=r"^headrace: no batch for \d+\.\d s \(step 7\)"):
            with watch.watched():
                time.sleep(0.3)
    with warnings.catch_warnings(record=True) as said:  # the next wait starts afresh
        warnings.simplefilter("always")
        with watch.watched():
            pass
    assert said == []


def test_a_wait_due_sooner_wakes_the_watcher_sleeping_until_a_later_one() -> None:
    # The watcher thread sleeps on a wake-up lock (not a Condition, which an interrupt
    # in the waiting thread could leave held): a wait added with an earlier warning
    # must wake it, or its warning would come when the later one's did.
    slow = StallWatch(60.0, lambda: 1, say=lambda waited, step: f"slow {step}")
    soon = StallWatch(0.05, lambda: 2, say=lambda waited, step: f"soon {step}")
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        with slow.watched():
            time.sleep(0.05)  # the watcher now sleeps until the slow wait's warning
            with soon.watched():
                deadline = time.monotonic() + 5
                while not said and time.monotonic() < deadline:
                    time.sleep(0.01)
    assert [str(w.message) for w in said][:1] == ["soon 2"]
    assert not any("slow" in str(w.message) for w in said)
