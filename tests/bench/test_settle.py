"""Between variants the bench waits for reads a closed stream left running: a close()
gives up on a slow read after 1.2 s, and that read would otherwise share the storage
and the CPUs with the next variant's timed steps."""

from __future__ import annotations

import threading

from headrace.bench._fresh import settle
from headrace.io._in_flight import Waiting, reads_in_flight


def _left_running(seconds: float) -> tuple[threading.Thread, threading.Event]:
    """A read in this process's registry, as the I/O layer enters one, for ``seconds``."""
    entered, release = threading.Event(), threading.Event()

    def read() -> None:
        with Waiting("read", "/data/shard-0.bin"):
            entered.set()
            release.wait(seconds)

    th = threading.Thread(target=read, daemon=True)
    th.start()
    entered.wait()
    return th, release


def test_settle_waits_until_no_read_is_in_flight() -> None:
    th, _ = _left_running(0.3)
    assert [r.where for r in reads_in_flight()] == ["/data/shard-0.bin"]
    waited = settle()
    assert reads_in_flight() == []
    assert waited > 0.1  # it did wait for the read, which took 0.3 s
    th.join()


def test_settle_gives_up_at_its_limit() -> None:
    th, release = _left_running(60)
    waited = settle(limit_s=0.05)
    assert 0.05 <= waited < 30 and len(reads_in_flight()) == 1  # the read goes on
    release.set()
    th.join()
    assert settle() < 30 and reads_in_flight() == []
