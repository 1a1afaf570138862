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
