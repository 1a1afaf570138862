"""Say so while a consumer waits for a batch longer than ``stall_warn_s``.

A read stuck in a stalled mount never returns, and a GET to a quiet endpoint
waits out its timeouts: without a word, the training step waited with them. A
:class:`StallWatch` times each wait for a batch; past ``stall_warn_s`` it warns
(``RuntimeWarning``) naming the wait, the step and the reads in flight in this
process, oldest first (:func:`~headrace.io.reads_in_flight`), again each time
the wait doubles, and once more when the batch comes. The read-ahead's consumer
polls it while it waits on the queue (its own thread warns, at the user's line);
a loader without read-ahead reads in the consumer's thread, where the read
itself may be stuck in the kernel, so a watcher thread polls instead. Only
warnings: what is read and in which order never depends on it.
"""

from __future__ import annotations

import itertools
import math
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from headrace._warn import warn_user
from headrace.io import ReadInFlight, reads_in_flight
from headrace.io._waits import wake, wakeup

__all__ = [
    "DEFAULT_STALL_WARN_S",
    "Running",
    "StallWatch",
    "arrived_message",
    "publish_running",
    "running",
    "running_now",
    "stall_message",
    "worker_stall_message",
]

DEFAULT_STALL_WARN_S = 60.0
#: Reads a warning names; the rest are counted.
SHOWN = 3
#: Longest timeout a wait for a warning takes at once, then another: a lock's or a
#: pipe's overflows past 9.2e9 s, and stall_warn_s=1e12 (never, in effect) killed the
#: watcher thread, and with it every later stall warning of the process.
_LONGEST_S = 86_400.0
_SEE = ' (docs/io.md, "Stalled storage")'
_WORDS = {"list": "listing"}  # ReadInFlight.what -> its noun


#: A function running on a read's arrays: what it is ("transform <name>", "Mapped fn
#: <name>"), its first and last step (-1: not known where it runs) and
#: time.monotonic() at its start (CLOCK_MONOTONIC: one clock for every process).
Running = tuple[str, int, int, float]

# The transforms and Mapped fns running now in this process, by call (a Mixture runs its
# sources' on the pool's threads); dict operations are atomic, as _in_flight's.
_RUNNING: dict[int, Running] = {}
_CALLS = itertools.count()
# Told of each change, under _TELLING (a worker process tells its main process:
# headrace._ring_layout.Doing).
_published: list[Callable[[list[Running]], None]] = []
_TELLING = threading.Lock()


@contextmanager
def running(what: str, first: int = -1, last: int = -1) -> Iterator[Running]:
    """The ``with`` block is ``what`` running on steps ``first``-``last`` (given as the
    ``as`` target): a stall warning meanwhile names it (:func:`running_now`)."""
    key = next(_CALLS)
    _RUNNING[key] = entry = (what, first, last, time.monotonic())
    _told()
    try:
        yield entry
    finally:
        del _RUNNING[key]
        _told()


def publish_running(tell: Callable[[list[Running]], None]) -> None:
    """Call ``tell(running_now())`` at each change of what runs, from here on."""
    _published.append(tell)


def _told() -> None:
    if _published:
        with _TELLING:  # one at a time: a Mixture's pool threads change it together
            now = running_now()
            for tell in _published:
                tell(now)


def running_now() -> list[Running]:
    """The transforms and Mapped fns running now in this process, oldest first."""
    return sorted(_RUNNING.copy().values(), key=lambda r: r[3])


def stall_message(
    waited_s: float,
    step: int,
    reads: list[ReadInFlight],
    transforming: Sequence[Running] = (),
) -> str:
    """The warning for a consumer that has waited ``waited_s`` for step ``step``;
    ``transforming``: the loader's transform and the Mapped fns running meanwhile
    (:data:`Running`), which a slow augmentation's wait is in (its warning said "no
    read ... in flight (the source may be decoding...)" until 2026-12-07, and named no
    transform; a Mapped fn's, until 2026-12-07 too)."""
    head = f"headrace: no batch for {waited_s:.1f} s (step {step}): "
    if transforming:
        said = _running(transforming)
        if not reads:
            return head + said
        return head + said + "; meanwhile " + _reads(reads) + _SEE
    if not reads:
        said = (
            "no read, open or listing of this process is in flight (the source may be "
            "decoding, waiting for a lock, or reading in worker processes)"
        )
    else:
        said = _reads(reads)
    return head + said + _SEE


def _running(functions: Sequence[Running], workers: int | None = None) -> str:
    """``"transform f has run for 2.0 s on step 3; the wait is the transform's: ..."``
    (``workers``: how many worker processes run it now, if any)."""
    now = time.monotonic()
    named: dict[str, str] = {}  # one a name (a Mixture's pool runs several): the oldest
    for what, first, last, t0 in sorted(functions, key=lambda r: r[3]):
        named.setdefault(what, f"{what} has run for {now - t0:.1f} s{_on_steps(first, last)}")
    whose = "theirs" if len(named) > 1 else "the function's"
    if len(named) == 1 and next(iter(named)).startswith("transform "):
        whose = "the transform's"
    spread = (
        "(more) worker processes (HeadraceDataLoader(num_workers=k))"
        if workers is None
        else f"more worker processes (num_workers, now {workers})"
    )
    return (
        f"{', and '.join(named.values())}; the wait is {whose}: spread it over {spread}, or "
        "make it cheaper (fewer Python operations a row, work on the whole array, or on the "
        "GPU)"
    )


def _reads(reads: list[ReadInFlight]) -> str:
    """``"1 open and 2 reads in flight, the oldest for 3.0 s: ...; stalled storage?"``"""
    n = len(reads)
    shown = ", ".join(str(r) for r in reads[:SHOWN])
    more = f", and {n - SHOWN} more" if n > SHOWN else ""
    # "1 open, 2 reads and 1 listing": by kind, the oldest's first.
    kinds = [
        f"{k} {_WORDS.get(w, w)}{'s' * (k > 1)}" for w, k in Counter(r.what for r in reads).items()
    ]
    what = " and ".join([", ".join(kinds[:-1]), kinds[-1]] if len(kinds) > 1 else kinds)
    return (
        f"{what} in flight, the oldest for {reads[0].age_s:.1f} s: {shown}{more}; stalled storage?"
    )


def _on_steps(first: int, last: int) -> str:
    if first < 0:  # not known where it runs
        return ""
    return f" on step {first}" if first == last else f" on steps {first}-{last}"


def worker_stall_message(
    waited_s: float,
    step: int,
    worker: int,
    workers: int,
    pid: int,
    doing: Running | None = None,
    started: bool = True,
    script: str | None = None,
) -> str:
    """The warning for a main process that has waited ``waited_s`` for step ``step``
    from worker process ``worker`` (of ``workers``, process ``pid``); ``doing``: the
    transform or Mapped fn that worker runs now (until 2026-12-07 never named
    here, only on the worker's stderr, and this said "stalled storage?"). A worker not
    ``started`` is still importing the main module (``script``, which it runs again):
    an unguarded ``init_process_group`` there waited for good, and this blamed storage."""
    if not started:
        return (
            f"headrace: no batch for {waited_s:.1f} s (step {step}): worker {worker} of "
            f"{workers} (pid {pid}) has not started after {waited_s:.1f} s: it may be stuck "
            f"importing the main module{f' {script}' if script else ''}, whose top-level "
            "code each worker runs again (forkserver and spawn import it; a second "
            "init_process_group there waits for good). Guard the script's top level "
            'with `if __name__ == "__main__":`.'
        )
    if doing is not None:
        return (
            f"headrace: no batch for {waited_s:.1f} s (step {step}): waiting for worker "
            f"{worker} of {workers} (pid {pid}), whose {_running([doing], workers)}"
        )
    return (
        f"headrace: no batch for {waited_s:.1f} s (step {step}): waiting for worker {worker} "
        f"of {workers} (pid {pid}), which reads it; the worker's own warnings on stderr name "
        f"its reads in flight; stalled storage?{_SEE}"
    )


def arrived_message(waited_s: float, step: int) -> str:
    """The line said when the batch of a wait that warned comes."""
    return f"headrace: the batch of step {step} came after {waited_s:.1f} s"


class StallWatch:
    """Times waits for a batch and warns while one lasts past ``after_s`` (``None``:
    never); ``step()`` is the step waited for; ``say(waited_s, step)`` the warning
    (by default :func:`stall_message`, naming this process's reads in flight)."""

    def __init__(
        self,
        after_s: float | None,
        step: Callable[[], int],
        say: Callable[[float, int], str] | None = None,
    ) -> None:
        self.after_s = after_s
        self._step = step
        self._say = say or (lambda waited, at: stall_message(waited, at, reads_in_flight()))
        self._t0 = 0.0
        self._due = math.inf
        self._warned = False
        # A warning the watcher thread could not give (-W error made it an exception):
        # the waiting thread raises it when its wait ends.
        self._failed: Exception | None = None

    def begin(self) -> None:
        """A wait starts."""
        self._t0 = time.monotonic()
        self._due = math.inf if self.after_s is None else self.after_s
        self._warned = False

    def due_in(self) -> float:
        """Seconds until the next warning is due (``inf``: none will be), at most a
        day (:data:`_LONGEST_S`): a timeout that a lock and a pipe's poll can take."""
        if self._due == math.inf:
            return math.inf
        return min(max(0.0, self._due - (time.monotonic() - self._t0)), _LONGEST_S)

    def poll(self) -> None:
        """Warn if the wait has passed the next warning's time (then due at twice it)."""
        waited = time.monotonic() - self._t0
        if waited < self._due:
            return
        while self._due <= waited:
            self._due *= 2
        self._warned = True
        warn_user(self._say(waited, self._step()), RuntimeWarning, varies=True)

    def end(self, *, arrived: bool) -> None:
        """The wait is over; after a warning, one line says when the batch came."""
        if self._warned and arrived:
            self._warned = False
            waited = time.monotonic() - self._t0
            warn_user(arrived_message(waited, self._step()), RuntimeWarning, varies=True)
        self._due = math.inf

    def fail(self, exc: Exception) -> None:
        """The watcher thread's warning raised ``exc`` (warnings made errors): no other
        warning of this wait, not even the batch's arrival; :meth:`watched` raises it."""
        self._failed = exc
        self._warned = False
        self._due = math.inf

    @contextmanager
    def watched(self) -> Iterator[None]:
        """Time the ``with`` block as a wait, polled from the watcher thread (for a wait
        whose own thread may be stuck in a read); the batch came if it ends normally.
        A warning made an error (``-W error``) is raised here once the block ends, as
        read-ahead's waiting ``next()`` raises it: a read cannot be interrupted."""
        if self.after_s is None:
            yield
            return
        self.begin()
        _WATCHER.add(self)
        arrived = False
        try:
            yield
            arrived = True
        finally:
            _WATCHER.discard(self)  # polled no more: end() sees every warning it gave
            self.end(arrived=arrived)
            failed, self._failed = self._failed, None
            if failed is not None and arrived:  # else the block's own error goes on
                raise failed


class _Watcher:
    """One daemon thread polls the process's watched waits, each at its next warning's
    time. A wait costs a lock, a set insert and removal: the loader without read-ahead
    waits once per chunk (1.8 ms of 32 token batches in the default bench), where
    starting a thread for each wait cost 50-100 us. The thread sleeps until the
    earliest warning it knew of; a wait added with an earlier one wakes it.

    A plain lock and a wake-up, not a ``threading.Condition``: the waiting thread
    takes the lock around its read, where a Ctrl-C lands, and a Condition taken in
    its Python ``__enter__`` could be left held by the interrupt, stopping this
    thread for good (see :mod:`headrace.io._waits`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._wake = wakeup()  # released when a wait due sooner is added
        self._waits: set[StallWatch] = set()
        self._thread: threading.Thread | None = None
        self._wakes_at = math.inf  # when the thread wakes next (monotonic)

    def add(self, watch: StallWatch) -> None:
        with self._lock:
            self._waits.add(watch)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="headrace-stall", daemon=True
                )
                self._thread.start()
            elif time.monotonic() + watch.due_in() < self._wakes_at:
                wake(self._wake)

    def discard(self, watch: StallWatch) -> None:
        with self._lock:
            self._waits.discard(watch)

    def _run(self) -> None:
        while True:
            with self._lock:
                wait = min((w.due_in() for w in self._waits), default=math.inf)
                self._wakes_at = time.monotonic() + wait
            self._wake.acquire(timeout=-1 if wait == math.inf else wait)
            with self._lock:  # polled under the lock: never after its wait's end()
                self._poll()

    def _poll(self) -> None:
        # A function of its own: a loop variable of _run held the last wait polled, and
        # through it a dropped loader, its source and their open files, while the thread
        # slept (for ever once nothing else waited).
        for w in self._waits:
            try:
                w.poll()
            except Exception as exc:  # a warning made an error (-W error)
                w.fail(exc)  # raised by the waiting thread: this one has no caller

    def forget(self) -> None:
        # After fork: the parent's thread was not copied, and its waits are not ours.
        self._lock = threading.Lock()  # a parent's thread may have held the old one
        self._wake = wakeup()
        self._waits = set()
        self._thread = None
        self._wakes_at = math.inf


def _forget_running() -> None:
    # After fork: the parent's threads' functions do not run here, nor its publishers.
    global _TELLING
    _RUNNING.clear()
    _published.clear()
    _TELLING = threading.Lock()  # a parent's thread may have held it at the fork


_WATCHER = _Watcher()
os.register_at_fork(after_in_child=_WATCHER.forget)
os.register_at_fork(after_in_child=_forget_running)
