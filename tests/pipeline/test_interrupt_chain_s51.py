"""A Ctrl-C landing while the consumer waits for the read-ahead is raised alone: it
landed inside the queue's ``except IndexError`` (an empty deque) and the loader's
``except queue.Empty``, so Python printed it as "During handling of the above
exception, another exception occurred" under two tracebacks of headrace's internals,
as if the loader had failed (a user's first Ctrl-C of a notebook loop, 2026-12-07)."""

from __future__ import annotations

import _thread
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headrace.formats import TokenSource
from headrace.pipeline import Loader, Mapped


def _slow(arrays: dict[str, Any], samples: Any) -> dict[str, Any]:
    time.sleep(0.3)  # the read-ahead is behind: the consumer waits in the queue
    return arrays


@pytest.mark.parametrize("batches_first", [0, 2])
def test_ctrl_c_while_waiting_for_the_read_ahead_has_no_chained_errors(
    tmp_path: Path, batches_first: int
) -> None:
    path = tmp_path / "t.bin"
    np.arange(100_000, dtype=np.uint32).tofile(path)
    src = Mapped(TokenSource(path, context=16, dtype="uint32"), _slow)
    with Loader(src, batch_size=4, seed=1, prefetch=2) as loader:
        it = iter(loader)
        for _ in range(batches_first):
            next(it)
        timer = threading.Timer(0.1, _thread.interrupt_main)  # as a SIGINT would
        timer.start()
        try:
            with pytest.raises(KeyboardInterrupt) as caught:
                for _ in range(50):
                    next(it)
        finally:
            timer.cancel()
    assert caught.value.__context__ is None, repr(caught.value.__context__)
    assert caught.value.__cause__ is None
