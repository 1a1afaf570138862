"""A loader's iterator after an error ended it, and iterators under closes from threads."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from _fds import fds_in
from headrace.errors import ConfigError, StateError, StorageError
from headrace.formats import TokenSource
from headrace.pipeline import Loader, LoaderStatus
from headrace.testing import batch_digest


def _tokens(tmp_path: Path) -> Path:
    path = tmp_path / "t.bin"
    np.random.default_rng(0).integers(0, 1000, 1 << 13, dtype=np.uint16).tofile(path)
    return path


class _FailsOnce(TokenSource):
    """Fault injection: the first read of sample 8 or later (step 2 of batches of 4)
    raises ``error`` (Ctrl-C landing inside the read, or storage that fails once)."""

    def __init__(self, path: Path, error: BaseException) -> None:
        super().__init__(path, dtype="uint16", context=16)
        self.error: BaseException | None = error

    def read(self, seed: int, samples: Any) -> Any:
        if self.error is not None and (np.asarray(samples) >= 8).any():
            error, self.error = self.error, None
            raise error
        return super().read(seed, samples)


@pytest.mark.parametrize("prefetch", [0, 3])
@pytest.mark.parametrize("error", [KeyboardInterrupt(), StorageError("no such block")])
def test_an_iterator_an_error_ended_does_not_end_quietly_after_it(
    tmp_path: Path, prefetch: int, error: BaseException
) -> None:
    # A loop that caught the error (Ctrl-C in a notebook, a retry on storage errors)
    # and called next() again got StopIteration: the run ended as if its data were
    # done, at step 2 of 6, without a word.
    path = _tokens(tmp_path)
    src = _FailsOnce(path, error)
    with Loader(src, batch_size=4, steps=6, prefetch=prefetch, chunk_steps=1) as ld:
        it = iter(ld)
        got = [batch_digest([next(it)]) for _ in range(2)]
        with pytest.raises(type(error)):
            next(it)
        assert ld.step == 2
        with pytest.raises(StateError, match=r"ended at step 2 with \w+.*iter\(loader\)"):
            next(it)
        got += [batch_digest([b]) for b in ld]  # as it says: on from step 2
    with Loader(TokenSource(path, dtype="uint16", context=16), batch_size=4, steps=6) as ld:
        assert got == [batch_digest([b]) for b in ld]


@pytest.mark.parametrize("prefetch", [0, 1, 8])
@pytest.mark.parametrize(("at", "end", "stride"), [(3, 5, 1), (3, 3, 1), (4, 9, 1), (2, 9, 3)])
def test_steps_lowered_while_iterating_ends_the_iteration_there(
    tmp_path: Path, prefetch: int, at: int, end: int, stride: int
) -> None:
    # Only the chunks not planned yet ended there: the planned ones (and, with
    # read-ahead, the queued ones) were handed out past it. steps=5 set after 3
    # batches yielded steps 3-6 without read-ahead and 3-14 with it.
    src = TokenSource(_tokens(tmp_path), dtype="uint16", context=16)
    with Loader(src, batch_size=4, prefetch=prefetch, step_stride=stride) as ld:
        it = iter(ld)
        got = [batch_digest([next(it)]) for _ in range(at)]
        ld.steps = end
        got += [batch_digest([b]) for b in it]
        stopped_at = ld.step
    with Loader(src, batch_size=4, steps=end, step_stride=stride) as ld:
        assert got == [batch_digest([b]) for b in ld]
        assert stopped_at == ld.step


@pytest.mark.parametrize("prefetch", [0, 4])
@pytest.mark.parametrize("taken", [1, 2, 3])
def test_an_iterator_resumed_after_close_reopens_no_file(
    tmp_path: Path, prefetch: int, taken: int
) -> None:
    # Without read-ahead, the next() after a close() that followed the first batch (a
    # chunk of its own) told the closed source what came next (source.prefetch) before
    # it found itself stale: the source opened its file again, for good.
    src = TokenSource(_tokens(tmp_path), dtype="uint16", context=16)
    ld = Loader(src, batch_size=4, prefetch=prefetch)
    it = iter(ld)
    for _ in range(taken):
        next(it)
    ld.close()
    with pytest.raises(StateError, match="the loader is closed"):
        next(it)
    assert fds_in(tmp_path) == 0


@pytest.mark.parametrize("host_order", ["plan", "address"])
@pytest.mark.parametrize(
    ("step", "said"),
    [(2**64, r"steps \[18446744073709551616, .* are out of range"), (1.5, "must be integers")],
)
def test_batch_at_a_step_no_plan_holds_says_which(
    tmp_path: Path, host_order: str, step: Any, said: str
) -> None:
    # batch_at(2**64) was NumPy's bare "OverflowError: Python int too large to convert
    # to C long", and batch_at(1.5) read step 1: the step was cast to int64 first.
    src = TokenSource(_tokens(tmp_path), dtype="uint16", context=16)
    with Loader(src, batch_size=4, rank=0, world_size=2, host_order=host_order) as ld:  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match=said):
            ld.batch_at(step)


class _HeldUntilClosed(TokenSource):
    """Fault injection: the read of step 3 (samples 12-15) waits until ``loader`` is
    closed, as a slow read does that a close() from another thread comes during."""

    loader: Loader | None = None
    entered = threading.Event()

    def read(self, seed: int, samples: Any) -> Any:
        if 12 in np.asarray(samples) and self.loader is not None:
            self.entered.set()
            deadline = time.monotonic() + 10  # a bound on hanging, not a speed check
            while self.loader.status is not LoaderStatus.CLOSED:
                assert time.monotonic() < deadline
                time.sleep(0.001)
        return super().read(seed, samples)


def test_an_iteration_begun_as_another_thread_closes_the_loader_stays_closed(
    tmp_path: Path,
) -> None:
    # iter() stopped the old read-ahead, waiting on its read, while close() came from
    # another thread; then it set the loader running again: the closed loader said
    # "running", and its new iterator read on from the closed source (reopening it).
    src = _HeldUntilClosed(_tokens(tmp_path), dtype="uint16", context=16)
    src.entered = threading.Event()
    ld = Loader(src, batch_size=4, prefetch=8, chunk_steps=1)
    src.loader = ld
    old = iter(ld)
    next(old)
    assert src.entered.wait(10)
    stopping = ld._producer
    assert stopping is not None
    begun: list[object] = []

    def begin() -> None:
        try:
            begun.append(iter(ld))
        except ConfigError as exc:
            begun.append(exc)

    thread = threading.Thread(target=begin)
    thread.start()
    deadline = time.monotonic() + 10
    while not stopping._stop.is_set():  # iter() waits on the old read-ahead's read
        assert time.monotonic() < deadline
        time.sleep(0.001)
    ld.close()
    thread.join(10)
    assert ld.status is LoaderStatus.CLOSED
    assert isinstance(begun[0], ConfigError) and "closed" in str(begun[0])
    assert fds_in(tmp_path) == 0
