"""A loader dropped without close() in a reference cycle with its own iterator (a
transform that is a trainer's method, the trainer holding the iterator) is collected:
its read-ahead thread ends and its source's files close. And close() while a read
error waits unconsumed in the read-ahead queue does not lose that error."""

from __future__ import annotations

import gc
import threading
import time
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray

from _fds import fds_in
from headrace.errors import StateError
from headrace.formats import TokenSource
from headrace.pipeline import Loader
from headrace.pipeline._prefetch import Failure

_BOUND_S = 10.0  # a bound on hanging, never a speed check


def _tokens(tmp_path: Path) -> Path:
    path = tmp_path / "t.bin"
    np.random.default_rng(0).integers(0, 1000, 1 << 13, dtype=np.uint16).tofile(path)
    return path


class _Trainer:
    """Holds the loader's iterator; its method is the loader's transform: a cycle."""

    def __init__(self) -> None:
        self.it: Any = None

    def augment(self, arrays: dict[str, NDArray[Any]], samples: Any) -> dict[str, NDArray[Any]]:
        return arrays


class _FailsAt(TokenSource):
    """Fault injection: the ``n``-th read (from 1) raises an OSError."""

    def __init__(self, path: Path, n: int) -> None:
        super().__init__(path, dtype="uint16", context=16)
        self.n = n
        self.reads = 0

    def read(self, seed: int, samples: NDArray[np.int64]) -> dict[str, NDArray[Any]]:
        self.reads += 1
        if self.reads == self.n:
            raise OSError(f"injected: read {self.n} of t.bin failed")
        return super().read(seed, samples)


def _prefetch_threads(before: set[threading.Thread]) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "headrace-prefetch" and t not in before]


def _collected(ref: weakref.ref[Loader], tmp_path: Path, before: set[threading.Thread]) -> None:
    deadline = time.monotonic() + _BOUND_S
    while ref() is not None or _prefetch_threads(before) or fds_in(tmp_path):
        assert time.monotonic() < deadline, (
            ref() is not None,
            _prefetch_threads(before),
            fds_in(tmp_path),
        )
        gc.collect()
        time.sleep(0.01)


def _cycle(source: TokenSource, *, prefetch: int, chunk_steps: int) -> weakref.ref[Loader]:
    trainer = _Trainer()
    ld = Loader(
        source,
        batch_size=4,
        prefetch=prefetch,
        chunk_steps=chunk_steps,
        transform=trainer.augment,
    )
    trainer.it = iter(ld)
    next(trainer.it)
    return weakref.ref(ld)


@pytest.mark.parametrize(("prefetch", "chunk_steps"), [(8, 1), (1, 1), (8, 4)])
def test_a_loader_in_a_cycle_with_its_iterator_is_collected_and_its_thread_ends(
    tmp_path: Path, prefetch: int, chunk_steps: int
) -> None:
    # The read-ahead thread held the loader (and through its transform the trainer and
    # the iterator): nothing was ever collected, the thread waited on its full queue for
    # ever, and the source's files stayed open.
    before = set(threading.enumerate())
    src = TokenSource(_tokens(tmp_path), dtype="uint16", context=16)
    ref = _cycle(src, prefetch=prefetch, chunk_steps=chunk_steps)
    del src
    _collected(ref, tmp_path, before)


def test_a_loader_in_a_cycle_whose_read_ahead_failed_is_collected(tmp_path: Path) -> None:
    # The read-ahead's error, waiting for room in a full queue (depth 1), held the
    # loader through its traceback: the thread never ended.
    before = set(threading.enumerate())
    src = _FailsAt(_tokens(tmp_path), 3)
    ref = _cycle(src, prefetch=1, chunk_steps=1)
    deadline = time.monotonic() + _BOUND_S
    while src.reads < 3:  # the failing read is made before the cycle is dropped
        assert time.monotonic() < deadline
        time.sleep(0.001)
    del src
    _collected(ref, tmp_path, before)


def test_the_iterator_of_a_collected_cycle_still_read_the_same_batches(tmp_path: Path) -> None:
    # The thread no longer holds the loader: an iteration held only by its consumer
    # (no cycle, no gc) still yields every batch, the same as without read-ahead.
    path = _tokens(tmp_path)
    got = []
    for prefetch in (0, 8):
        trainer = _Trainer()
        src = TokenSource(path, dtype="uint16", context=16)
        trainer.it = iter(
            Loader(src, batch_size=4, prefetch=prefetch, steps=40, transform=trainer.augment)
        )
        gc.collect()
        got.append([b["x"].tobytes() for b in trainer.it])
        src.close()
    assert len(got[0]) == 40
    assert got[0] == got[1]


def _failure_waits(ld: Loader) -> None:
    """Until the read-ahead's error waits in its queue, unconsumed."""
    deadline = time.monotonic() + _BOUND_S
    while not (
        ld._producer is not None
        and any(isinstance(i, Failure) for i in ld._producer.queue._items.copy())
    ):
        assert time.monotonic() < deadline, "the read-ahead never failed"
        time.sleep(0.001)


@pytest.mark.parametrize(("chunk_steps", "taken", "failed_at"), [(1, 1, 2), (4, 2, 3)])
def test_close_with_a_read_error_waiting_names_it(
    tmp_path: Path, chunk_steps: int, taken: int, failed_at: int
) -> None:
    # The error was dropped with the queue: the next next() said only that the loader
    # was closed. (chunk_steps=4: the consumer is inside a chunk of 2 when it closes,
    # and the chunk of steps 3-6 failed.)
    src = _FailsAt(_tokens(tmp_path), 3)
    ld = Loader(src, batch_size=4, prefetch=8, chunk_steps=chunk_steps)
    it = iter(ld)
    for _ in range(taken):
        next(it)
    _failure_waits(ld)
    ld.close()
    said = rf"(?s)loader is closed.*at step {failed_at} .*injected: read 3 of t\.bin"
    with pytest.raises(StateError, match=said) as info:
        next(it)
    assert isinstance(info.value.__cause__, OSError)
    assert fds_in(tmp_path) == 0


def test_load_state_dict_with_a_read_error_waiting_names_it(tmp_path: Path) -> None:
    src = _FailsAt(_tokens(tmp_path), 3)
    with Loader(src, batch_size=4, prefetch=8, chunk_steps=1) as ld:
        it = iter(ld)
        next(it)
        _failure_waits(ld)
        ld.load_state_dict(ld.state_dict())
        with pytest.raises(StateError, match=r"(?s)iterate the loader again.*OSError"):
            next(it)
        assert next(iter(ld))["x"].shape == (4, 16)  # the loader reads on


@pytest.mark.parametrize(
    ("value", "said"), [({}, "as a dict"), (7, "as an int"), ([1], "as a list")]
)
def test_a_value_that_is_no_array_is_named_by_its_type(
    tmp_path: Path, value: object, said: str
) -> None:
    # It said "returned 'd' with shape dict", a shape of no array.
    from headrace.errors import ConfigError

    def adds(arrays: dict[str, NDArray[Any]], samples: Any) -> dict[str, Any]:
        return {**arrays, "d": value}

    src = TokenSource(_tokens(tmp_path), dtype="uint16", context=8)
    with (
        Loader(src, batch_size=2, steps=1, prefetch=0, transform=adds) as ld,
        pytest.raises(ConfigError, match=rf"returned 'd' {said}, not an array, for 2 samples"),
    ):
        next(iter(ld))
