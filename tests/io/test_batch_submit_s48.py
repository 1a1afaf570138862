"""A batch whose pool cannot take another of its loops (s48)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headrace.io import RangeReader, ReaderConfig
from headrace.io import _reader as reader_mod
from headrace.io._batch import run_batch


class NoThreadAfter(ThreadPoolExecutor):
    """Fault injection: the ``ok``-th submit on fails as a process out of threads does."""

    def __init__(self, ok: int) -> None:
        super().__init__(4)
        self.ok = ok
        self.submitted = 0

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        if self.submitted >= self.ok:
            raise RuntimeError("can't start new thread")
        self.submitted += 1
        return super().submit(fn, *args, **kwargs)


@pytest.mark.parametrize("ok", [0, 1, 2])
def test_a_pool_out_of_threads_leaves_the_batch_to_the_loops_it_has(ok) -> None:
    # The pool's refusal of the batch's second (or first) loop was raised out of the
    # batch while the loops already submitted went on reading, into a buffer (and a
    # file) the caller had let go of. The caller's own loop is enough to finish it.
    pool = NoThreadAfter(ok)
    done: list[int] = []
    lock = threading.Lock()

    def read(i: int) -> None:
        with lock:
            done.append(i)

    try:
        run_batch(40, read, depth=4, pool=pool)
        after = len(done)
        assert sorted(done) == list(range(40))
    finally:
        pool.shutdown(wait=True)
    assert len(done) == after  # nothing read once the batch returned


def test_a_reader_on_a_pool_out_of_threads_reads_in_the_callers_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    arr = np.random.default_rng(48).integers(0, 256, 64 * 1024, dtype=np.uint8)
    path = tmp_path / "data.bin"
    path.write_bytes(arr.tobytes())
    pool = NoThreadAfter(1)
    monkeypatch.setattr(reader_mod, "_pool_for", lambda depth: (4, pool))
    cfg = ReaderConfig(strategy="pread", engine="threads", max_gap=0, max_span=1, in_flight=4)
    try:
        with RangeReader(cfg) as r:
            ranges = [(k * 1000, 10) for k in range(50)]
            got = r.read(str(path), ranges)
            assert [g.tobytes() for g in got] == [arr[o : o + n].tobytes() for o, n in ranges]
    finally:
        pool.shutdown(wait=True)
