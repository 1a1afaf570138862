"""Closing a source on a helper thread within a bound, and where no thread can start."""

from __future__ import annotations

import threading

import pytest

from headrace.pipeline._shutdown import close_source


class _Source:
    def __init__(self) -> None:
        self.closes = 0

    def close(self) -> None:
        self.closes += 1


def test_a_source_closes_under_its_lock_and_errors_reach_the_caller() -> None:
    src, lock = _Source(), threading.Lock()
    assert close_source(src.close, lock, 1.0, under_read=False)
    assert src.closes == 1 and not lock.locked()
    assert close_source(src.close, lock, 1.0, under_read=True)  # once now, once under it
    assert src.closes == 3

    def fails() -> None:
        raise OSError("close failed")

    with pytest.raises(OSError, match="close failed"):
        close_source(fails, lock, 1.0, under_read=False)


def test_a_close_held_by_a_read_goes_on_in_the_background() -> None:
    src, lock = _Source(), threading.Lock()
    lock.acquire()  # a read in progress
    assert not close_source(src.close, lock, 0.05, under_read=False)
    assert src.closes == 0
    lock.release()  # the read returns: the close runs then
    for t in threading.enumerate():
        if t.name == "headrace-close":
            t.join(5)
    assert src.closes == 1


def test_where_no_thread_can_start_it_closes_between_reads_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Python 3.12 refuses new threads in exit handlers, where the loaders still open
    # are closed (fault injected here: this interpreter may allow them).
    def refuse(self: threading.Thread) -> None:
        raise RuntimeError("can't create new thread at interpreter shutdown")

    monkeypatch.setattr(threading.Thread, "start", refuse)
    src, lock = _Source(), threading.Lock()
    assert close_source(src.close, lock, 0.05, under_read=False)
    assert src.closes == 1
    assert not close_source(src.close, lock, 0.05, under_read=True)  # never under a read
    lock.acquire()
    assert not close_source(src.close, lock, 0.05, under_read=False)  # nor waits past it
    assert src.closes == 1


_TRAIN = """
import signal, sys
import numpy as np
if sys.argv[-1] == "handler":  # as training frameworks set it: leave `with` blocks, then exit
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
from headrace.pipeline import Loader
class Stalled:
    def fingerprint(self):
        return {"kind": "stalled"}
    def read(self, seed, samples):
        if samples.min() >= 4:  # step 2 on: the storage stops answering
            stuck()
        return {"v": samples[:, None]}
with Loader(Stalled(), batch_size=2, prefetch=PREFETCH, chunk_steps=1) as ld:
    for batch in ld:
        pass
"""


@pytest.mark.parametrize("prefetch", [0, 4])
@pytest.mark.parametrize("handler", [False, True])
def test_sigterm_while_a_read_is_stuck_ends_the_process_promptly(
    prefetch: int, handler: bool
) -> None:
    # What torchrun, Slurm and Kubernetes send. Without a handler the kernel ends the
    # process; with one raising SystemExit, the loop leaves `with` (closing the loader
    # gives the stuck read-ahead 1 s) and the interpreter exits past the stuck thread.
    import signal

    from _stuck import interrupt_when_stuck

    script = _TRAIN.replace("PREFETCH", str(prefetch))
    if handler:
        script = script.replace('sys.argv[-1] == "handler"', "True")
    rc, err, seconds = interrupt_when_stuck(script, sig=signal.SIGTERM)
    assert rc == (143 if handler else -signal.SIGTERM), (rc, err[-2000:])
    assert seconds < 10, seconds  # 0.0-1.3 s measured; a margin for a loaded machine
