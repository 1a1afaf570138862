"""A loader's lifecycle under threads and signals: close() from two threads, from a
signal handler inside a close(), a close() an interrupt cut short, close() among a failed
chunk's reads or a batch_at(), load_state_dict() or iter() from one thread while another
iterates, an iterator's close() from a watchdog thread, fork() while a thread holds the
loader's lock.

Each interleaving is forced with events (and, where nothing of the loader's own can
hold a thread at the point needed, a wrapper that only waits there); a thread another
must wait for is seen parked through its frames, never timed with sleeps.
"""

from __future__ import annotations

import linecache
import os
import signal
import sys
import threading
import time
import warnings
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from _fds import fds_in
from headrace.errors import ConfigError, StateError, StorageError
from headrace.formats import TokenSource
from headrace.pipeline import Loader, LoaderStatus, _loader
from headrace.testing import batch_digest

_BOUND_S = 10.0  # a bound on hanging, never a speed check


def _tokens(tmp_path: Path) -> Path:
    path = tmp_path / "t.bin"
    np.random.default_rng(0).integers(0, 1000, 1 << 13, dtype=np.uint16).tofile(path)
    return path


def _source(path: Path) -> TokenSource:
    return TokenSource(path, dtype="uint16", context=16)


def _expected(path: Path, state: dict[str, Any], n: int) -> list[str]:
    """The first ``n`` batches' digests of a fresh loader resumed at ``state``."""
    with Loader(_source(path), batch_size=4, prefetch=0) as ld:
        ld.load_state_dict(state)
        return [batch_digest([b]) for b in islice(ld, n)]


_BEFORE: set[threading.Thread] = set()


@pytest.fixture(autouse=True)
def _threads_before() -> None:
    """The read-ahead threads an earlier test of this process left (on a stuck read it
    gave up on, by design): not this test's."""
    _BEFORE.clear()
    _BEFORE.update(t for t in threading.enumerate() if t.name == "headrace-prefetch")


def _prefetch_threads() -> list[threading.Thread]:
    """This test's read-ahead threads still running."""
    return [t for t in threading.enumerate() if t.name == "headrace-prefetch" and t not in _BEFORE]


def _until(done: Any) -> None:
    deadline = time.monotonic() + _BOUND_S
    while not done():
        assert time.monotonic() < deadline, "the interleaving never came"
        time.sleep(0.001)


def _parked(thread: threading.Thread) -> None:
    """Wait until ``thread`` has ended or waits on one of the loader's locks (its innermost
    frame a loader method at a ``with self._lock`` or ``with self._closing`` line)."""

    def parked() -> bool:
        if not thread.is_alive():
            return True
        frame = sys._current_frames().get(thread.ident or -1)
        if frame is None or not frame.f_code.co_filename.endswith("_loader.py"):
            return False
        line = linecache.getline(frame.f_code.co_filename, frame.f_lineno)
        return "with self._lock" in line or "with self._closing" in line

    _until(parked)


class _CloseHeld(TokenSource):
    """Fault injection: close() waits for ``release``, as a source's close does that
    waits for reads in flight."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, dtype="uint16", context=16)
        self.closing = threading.Event()
        self.release = threading.Event()
        self.closes = 0

    def close(self) -> None:
        self.closing.set()
        assert self.release.wait(_BOUND_S)
        self.closes += 1
        super().close()


def test_a_close_from_a_second_thread_returns_once_everything_is_released(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A second close() (another thread's, atexit's) came while the
    # first was still closing the source: it saw the status CLOSED and returned at once,
    # with the source's files still open (and, had the first been stopping the
    # read-ahead, its thread still running).
    monkeypatch.setattr(_loader, "_STOP_TIMEOUT_S", 60.0)  # the first close waits: no warning
    src = _CloseHeld(_tokens(tmp_path))
    ld = Loader(src, batch_size=4, prefetch=8, chunk_steps=1)
    next(iter(ld))
    assert fds_in(tmp_path) > 0
    first = threading.Thread(target=ld.close)
    first.start()
    assert src.closing.wait(_BOUND_S)
    seen: list[tuple[int, int, int]] = []

    def close_again() -> None:
        ld.close()
        seen.append((src.closes, fds_in(tmp_path), len(_prefetch_threads())))

    second = threading.Thread(target=close_again)
    second.start()
    _parked(second)
    src.release.set()
    first.join(_BOUND_S)
    second.join(_BOUND_S)
    assert seen == [(1, 0, 0)]  # closed once, and before the second close() returned
    assert ld.status is LoaderStatus.CLOSED


class _SignalledInRead(TokenSource):
    """Fault injection: the read of step 3 (samples 12-15, batches of 4) waits until the
    loader's close() has begun, then sends ``signum`` to the main thread, which waits in
    that close() for the read (Ctrl-C, or a handler's, landing inside the close)."""

    def __init__(self, path: Path, signum: int) -> None:
        super().__init__(path, dtype="uint16", context=16)
        self.signum = signum
        self.loader: Loader | None = None
        self.entered = threading.Event()
        self.closes = 0

    def read(self, seed: int, samples: Any) -> Any:
        ld = self.loader
        if ld is not None and 12 in np.asarray(samples):
            self.loader = None
            self.entered.set()
            _until(lambda: ld.status is LoaderStatus.CLOSED)
            signal.pthread_kill(threading.main_thread().ident or 0, self.signum)
        return super().read(seed, samples)

    def close(self) -> None:
        self.closes += 1
        super().close()


def test_a_close_an_interrupt_cut_short_is_finished_by_the_next(tmp_path: Path) -> None:
    # Ctrl-C while close() waited for the read-ahead's read left the loader CLOSED with
    # the source never closed; the next close() (and the one at exit) then did nothing:
    # the source's files stayed open for the rest of the process (a notebook's kernel).
    assert threading.current_thread() is threading.main_thread()
    src = _SignalledInRead(_tokens(tmp_path), signal.SIGINT)
    ld = Loader(src, batch_size=4, prefetch=8, chunk_steps=1)
    src.loader = ld
    it = iter(ld)
    next(it)
    assert src.entered.wait(_BOUND_S)
    with pytest.raises(KeyboardInterrupt):
        ld.close()
        _until(lambda: False)  # the signal lands here at the latest
    ld.close()  # finishes what the interrupted one began
    assert ld.status is LoaderStatus.CLOSED
    assert not _prefetch_threads()
    assert fds_in(tmp_path) == 0
    with pytest.raises(StateError, match="closed"):
        next(it)


def test_a_signal_handlers_close_inside_a_close_returns_and_that_one_goes_on(
    tmp_path: Path,
) -> None:
    # A handler (SIGTERM's, SIGUSR1's) that calls close() while the main thread is inside
    # close(): it must neither wait for its own thread (a plain lock: for ever) nor close
    # everything a second time under the first.
    assert threading.current_thread() is threading.main_thread()
    src = _SignalledInRead(_tokens(tmp_path), signal.SIGUSR1)
    ld = Loader(src, batch_size=4, prefetch=8, chunk_steps=1)
    handled: list[LoaderStatus] = []

    def handler(signum: int, frame: Any) -> None:
        ld.close()
        handled.append(ld.status)

    before = signal.signal(signal.SIGUSR1, handler)
    try:
        src.loader = ld
        it = iter(ld)
        next(it)
        assert src.entered.wait(_BOUND_S)
        ld.close()
        _until(lambda: bool(handled))  # the signal was handled (inside the close, or here)
    finally:
        signal.signal(signal.SIGUSR1, before)
    assert handled == [LoaderStatus.CLOSED]
    assert src.closes == 1
    assert not _prefetch_threads()
    assert fds_in(tmp_path) == 0


def test_load_state_dict_from_another_thread_between_batches_is_the_state_read_on(
    tmp_path: Path,
) -> None:
    # load_state_dict() from another thread while the consumer was between its check
    # that its iteration is current and its step's update: the loaded step was then
    # overwritten with the consumer's next, and the next iteration read on from there
    # (step 2, not the loaded 0): batches the loaded state does not name.
    path = _tokens(tmp_path)
    ld = Loader(_source(path), batch_size=4, prefetch=8, chunk_steps=1)
    state = ld.state_dict()
    it = iter(ld)
    next(it)
    at_step_1, go = threading.Event(), threading.Event()
    ended_at = ld._ended_at

    def held(step: int) -> bool:  # forces the interleaving only: the consumer waits here
        if step == 1:
            at_step_1.set()
            assert go.wait(_BOUND_S)
        return ended_at(step)

    ld._ended_at = held  # type: ignore[method-assign]
    consumer = threading.Thread(target=next, args=(it,))
    consumer.start()
    assert at_step_1.wait(_BOUND_S)
    loading = threading.Thread(target=ld.load_state_dict, args=(state,))
    loading.start()
    _parked(loading)
    go.set()
    consumer.join(_BOUND_S)
    loading.join(_BOUND_S)
    ld._ended_at = ended_at  # type: ignore[method-assign]
    assert ld.step == 0
    with pytest.raises(StateError, match="stale"):
        next(it)
    assert [batch_digest([b]) for b in islice(ld, 4)] == _expected(path, state, 4)
    ld.close()
    assert not _prefetch_threads()
    assert fds_in(tmp_path) == 0


def test_an_iteration_begun_while_load_state_dict_stops_the_last_leaks_no_thread(
    tmp_path: Path,
) -> None:
    # load_state_dict() in one thread stopped the read-ahead, then set the loader's
    # producer to None; an iter() in another thread began meanwhile and started its own:
    # forgotten, it was stopped by neither its iterator nor close(), and waited for ever
    # on its full queue (a headrace-prefetch thread, the loader and its source's files).
    path = _tokens(tmp_path)
    ld = Loader(_source(path), batch_size=4, prefetch=8, chunk_steps=1)
    it = iter(ld)
    for _ in range(3):
        next(it)
    state = ld.state_dict()
    old = ld._producer
    assert old is not None
    stopped, go = threading.Event(), threading.Event()
    stop = old.stop

    def held(timeout: float) -> bool:  # forces the interleaving only
        done = stop(timeout)
        if threading.current_thread() is loading:
            stopped.set()
            assert go.wait(_BOUND_S)
        return done

    old.stop = held  # type: ignore[method-assign]
    loading = threading.Thread(target=ld.load_state_dict, args=({**state, "step": 1},))
    loading.start()
    assert stopped.wait(_BOUND_S)
    again = iter(ld)
    next(again)
    new = ld._producer
    assert new is not None
    _until(new.queue.full)
    go.set()
    loading.join(_BOUND_S)
    again.close()  # type: ignore[attr-defined]
    assert ld.step == 1
    assert [batch_digest([b]) for b in islice(ld, 4)] == _expected(path, {**state, "step": 1}, 4)
    ld.close()
    _until(lambda: not new.thread.is_alive())
    assert not _prefetch_threads()
    assert fds_in(tmp_path) == 0


@pytest.mark.parametrize("prefetch", [0, 8])
def test_iterations_begun_in_two_threads_at_once_leave_one_current(
    tmp_path: Path, prefetch: int
) -> None:
    # Two threads each began an iteration and read from it: the older one is stale, the
    # newer reads on from the loader's step, and close() leaves no thread or file.
    path = _tokens(tmp_path)
    ld = Loader(_source(path), batch_size=4, prefetch=prefetch, chunk_steps=1)
    want = _expected(path, ld.state_dict(), 6)
    start = threading.Barrier(2)
    got: dict[str, list[object]] = {"a": [], "b": []}

    def run(name: str) -> None:
        start.wait(_BOUND_S)
        try:
            for b in islice(ld, 3):
                got[name].append(batch_digest([b]))
        except StateError as exc:
            got[name].append(exc)

    threads = [threading.Thread(target=run, args=(n,)) for n in got]
    for t in threads:
        t.start()
    for t in threads:
        t.join(_BOUND_S)
    ld.close()
    assert not _prefetch_threads()
    assert fds_in(tmp_path) == 0
    digests = [d for d in got["a"] + got["b"] if isinstance(d, str)]
    # Whatever each read is a batch of the run's steps, none twice.
    assert set(digests) <= set(want) and len(set(digests)) == len(digests)


class _FailsWhole(TokenSource):
    """Fault injection: a read of several steps holding step 3 (samples 12-15) fails, as
    storage that refuses a long range does; read again a step at a time (step_by_step),
    step 3's read waits until the loader is closed. ``reopened``: reads after its close."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, dtype="uint16", context=16)
        self.loader: Loader | None = None
        self.entered = threading.Event()
        self.closed = threading.Event()
        self.reopened = 0

    def read(self, seed: int, samples: Any) -> Any:
        s = np.asarray(samples)
        if s.size > 4 and 12 in s:
            raise StorageError("t.bin: a long range refused")
        ld = self.loader
        if ld is not None and s.min() == 12:
            self.entered.set()
            _until(lambda: ld.status is LoaderStatus.CLOSED)
        self.reopened += self.closed.is_set()
        return super().read(seed, samples)

    def close(self) -> None:
        super().close()
        self.closed.set()


class _AfterClose:
    """A transform that holds step 3's batch (samples 12-15) until ``source`` is closed:
    the close() lands between that step's read and the next one's (forces the
    interleaving only; it returns the rows as they are)."""

    def __init__(self, source: _FailsWhole) -> None:
        self.source = source

    def __call__(self, arrays: Any, samples: Any) -> Any:
        if np.asarray(samples.numbers).min() == 12:
            assert self.source.closed.wait(_BOUND_S)
        return arrays


@pytest.mark.parametrize("prefetch", [0, 8])
def test_a_close_among_a_failed_chunks_reads_again_reopens_no_file(
    tmp_path: Path, prefetch: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A chunk that failed is read again a step at a time; a close() from another thread
    # among those reads closed the source, and the next step's read reopened its files,
    # left open after close() had returned. (With read-ahead, close() gives up on those
    # reads after its wait, and closes the source meanwhile: so too.)
    monkeypatch.setattr(_loader, "_STOP_TIMEOUT_S", 0.1)
    src = _FailsWhole(_tokens(tmp_path))
    ld = Loader(src, batch_size=4, prefetch=prefetch, chunk_steps=4, transform=_AfterClose(src))
    src.loader = ld
    said: list[str] = []
    taken = threading.Event()  # steps 0-2 handed out (read-ahead reads step 3 sooner)

    def close() -> None:
        assert taken.wait(_BOUND_S) and src.entered.wait(_BOUND_S)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ld.close()
        said.extend(str(w.message) for w in caught)

    closer = threading.Thread(target=close)
    closer.start()
    it = iter(ld)
    for _ in range(3):
        next(it)
    taken.set()
    with pytest.raises(StateError, match="closed"):
        next(it)
    closer.join(_BOUND_S)
    assert not closer.is_alive()
    # The read close() gave up on returns once the source is closed: its thread is joined,
    # not warned of as left behind (as it was until 2026-12-07).
    assert said == []
    _until(lambda: not _prefetch_threads())  # the read it gave up on is over
    assert src.reopened == 0
    assert not _prefetch_threads()
    assert fds_in(tmp_path) == 0


def test_a_child_forked_while_a_thread_holds_the_loaders_lock_can_use_and_close_it(
    tmp_path: Path,
) -> None:
    # A consumer thread between its check and its step's update (holding the loader's
    # lock) as the process forks: the child's state_dict() and close() must not wait
    # for a thread it does not have.
    ld = Loader(_source(_tokens(tmp_path)), batch_size=4, prefetch=8, chunk_steps=1)
    next(iter(ld))
    held, go = threading.Event(), threading.Event()

    def hold() -> None:
        with ld._lock:
            held.set()
            assert go.wait(_BOUND_S)

    thread = threading.Thread(target=hold)
    thread.start()
    assert held.wait(_BOUND_S)
    with warnings.catch_warnings():
        # fork() with threads running: Python's DeprecationWarning, and JAX's at-fork
        # RuntimeWarning where an earlier test of this process imported it.
        warnings.simplefilter("ignore")
        pid = os.fork()
    if pid == 0:  # the child: exits with 0 only if neither waits
        code = 1
        try:
            signal.alarm(20)
            code = 0 if ld.state_dict()["step"] == 1 else 2
            ld.close()
        finally:
            os._exit(code)
    go.set()
    thread.join(_BOUND_S)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    ld.close()


def test_batch_at_as_another_thread_closes_the_loader_reopens_no_file(tmp_path: Path) -> None:
    # batch_at() asked whether the loader was closed, then read: a close() from another
    # thread in between closed the source, and the read reopened its files.
    ld = Loader(_source(_tokens(tmp_path)), batch_size=4, prefetch=0)
    ld.batch_at(0)
    planned = ld._planned
    planning = threading.Event()

    def held(steps: list[int]) -> Any:  # forces the interleaving only
        planning.set()
        _until(lambda: ld._closed)
        return planned(steps)

    ld._planned = held  # type: ignore[method-assign]
    failed: list[BaseException] = []

    def read() -> None:
        try:
            ld.batch_at(5)
        except BaseException as exc:
            failed.append(exc)

    reader = threading.Thread(target=read)
    reader.start()
    assert planning.wait(_BOUND_S)
    ld.close()
    reader.join(_BOUND_S)
    assert len(failed) == 1 and isinstance(failed[0], ConfigError), failed
    assert "closed" in str(failed[0])
    assert fds_in(tmp_path) == 0


class _HeldUntilStopped(TokenSource):
    """Fault injection: the read of step 3 (samples 12-15) waits until the read-ahead
    thread reading it is told to stop, as a slow read does."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, dtype="uint16", context=16)
        self.loader: Loader | None = None

    def read(self, seed: int, samples: Any) -> Any:
        ld = self.loader
        if ld is not None and 12 in np.asarray(samples):
            producer = ld._producer
            assert producer is not None
            _until(producer._stop.is_set)
        return super().read(seed, samples)


def test_an_iterators_close_from_another_thread_while_it_waits_in_next_ends_it(
    tmp_path: Path,
) -> None:
    # A watchdog thread closing the iterator that the training loop waits in (next(),
    # for a slow read): a generator's close() raised a bare "ValueError: generator
    # already executing", and the read-ahead ran on.
    path = _tokens(tmp_path)
    src = _HeldUntilStopped(path)
    ld = Loader(src, batch_size=4, prefetch=8, chunk_steps=1)
    src.loader = ld
    it = iter(ld)
    for _ in range(3):
        next(it)
    got: list[object] = []

    def wait() -> None:
        try:
            got.append(next(it))
        except StateError as exc:
            got.append(exc)

    waiting = threading.Thread(target=wait)
    waiting.start()
    _until(lambda: it._batches.gi_running)  # type: ignore[attr-defined]
    it.close()  # type: ignore[attr-defined]
    waiting.join(_BOUND_S)
    assert len(got) == 1 and isinstance(got[0], StateError) and "stale" in str(got[0])
    _until(lambda: not _prefetch_threads())
    src.loader = None
    state = {**ld.state_dict()}
    assert state["step"] == 3
    assert [batch_digest([b]) for b in islice(ld, 2)] == _expected(path, state, 2)
    ld.close()
    assert fds_in(tmp_path) == 0
