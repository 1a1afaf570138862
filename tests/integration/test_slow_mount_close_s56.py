"""close() on a loader whose mount stopped answering names the reads it is stuck on.

A read inside the kernel cannot be cancelled, so there close() still gives up on the
read-ahead thread and warns; the warning said only "still inside TokenSource.read of
steps ... (stalled storage?)", not which file, which the user needs to find the mount
(the only warning left now that an object store's stalled requests are cancelled).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from test_slow_mount_close import _reading, _threads, _tokens, src_dir, stalled

from headrace.emulate import SlowMount
from headrace.pipeline import Loader

pytestmark = pytest.mark.integration

__all__ = ["src_dir"]  # the fixture, used here


def test_close_on_a_stalled_mount_names_the_reads_in_flight(
    slow_mount: Callable[..., SlowMount], src_dir: Path
) -> None:
    m = slow_mount(src_dir, read_latency_ms=1)
    ld = Loader(_tokens(m.mnt), batch_size=8, chunk_steps=4)
    it = iter(ld)
    for _ in range(3):
        next(it)
    taken = [0]

    def consume() -> None:  # the training loop, waiting for its next batch
        try:
            for _ in range(10_000):
                next(it)
                taken[0] += 1
        except BaseException:
            pass

    consumer = threading.Thread(target=consume, daemon=True)
    with stalled(m, at_most_s=30) as resume:
        consumer.start()
        deadline = time.monotonic() + 20
        seen = -1
        while not (_reading() and taken[0] == seen):  # stuck inside a read of the mount
            assert time.monotonic() < deadline, "no read reached the stalled mount"
            seen = taken[0]
            time.sleep(0.3)
        path = re.escape(str(m.mnt / "t.bin"))
        with pytest.warns(
            RuntimeWarning,
            match=r"gave up on the read-ahead thread, still inside TokenSource\.read of steps "
            rf".*\(stalled storage\?\); this process's reads in flight: {path} \[\d+, \d+\)",
        ):
            ld.close()
        resume()
    consumer.join(10)
    deadline = time.monotonic() + 20
    while _threads("headrace-prefetch", "headrace-close"):
        assert time.monotonic() < deadline
        time.sleep(0.02)
