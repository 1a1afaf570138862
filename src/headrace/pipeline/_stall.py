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

import math
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from headrace._warn import warn_user
from headrace.io import ReadInFlight, reads_in_flight

__all__ = ["DEFAULT_STALL_WARN_S", "StallWatch", "stall_message"]

DEFAULT_STALL_WARN_S = 60.0
#: Reads a warning names; the rest are counted.
SHOWN = 3


def stall_message(waited_s: float, step: int, reads: list[ReadInFlight]) -> str:
    """The warning for a consumer that has waited ``waited_s`` for step ``step``."""
    head = f"headrace: no batch for {waited_s:.1f} s (step {step}): "
    if not reads:
        said = (
            "no read of this process is in flight (the source may be decoding, waiting "
            "for a lock, or reading in worker processes)"
        )
    else:
        n = len(reads)
        shown = ", ".join(str(r) for r in reads[:SHOWN])
        more = f", and {n - SHOWN} more" if n > SHOWN else ""
        said = (
            f"{n} read{'s' * (n > 1)} in flight, the oldest for {reads[0].age_s:.1f} s: "
            f"{shown}{more}; stalled storage?"
        )
    return head + said + ' (docs/io.md, "Stalled storage")'


class StallWatch:
    """Times waits for a batch and warns while one lasts past ``after_s`` (``None``:
    never); ``step()`` is the step waited for."""

    def __init__(self, after_s: float | None, step: Callable[[], int]) -> None:
        self.after_s = after_s
        self._step = step
        self._t0 = 0.0
        self._due = math.inf
        self._warned = False

    def begin(self) -> None:
        """A wait starts."""
        self._t0 = time.monotonic()
        self._due = math.inf if self.after_s is None else self.after_s
        self._warned = False

    def due_in(self) -> float:
        """Seconds until the next warning is due (``inf``: none will be)."""
        return max(0.0, self._due - (time.monotonic() - self._t0))

    def poll(self) -> None:
        """Warn if the wait has passed the next warning's time (then due at twice it)."""
        waited = time.monotonic() - self._t0
        if waited < self._due:
            return
        while self._due <= waited:
            self._due *= 2
        self._warned = True
        warn_user(stall_message(waited, self._step(), reads_in_flight()), RuntimeWarning)

    def end(self, *, arrived: bool) -> None:
        """The wait is over; after a warning, one line says when the batch came."""
        if self._warned and arrived:
            self._warned = False
            warn_user(
                f"headrace: the batch of step {self._step()} came after "
                f"{time.monotonic() - self._t0:.1f} s",
                RuntimeWarning,
            )
        self._due = math.inf

    @contextmanager
    def watched(self) -> Iterator[None]:
        """Time the ``with`` block as a wait, polled from a watcher thread (for a wait
        whose own thread may be stuck in a read); the batch came if it ends normally."""
        if self.after_s is None:
            yield
            return
        self.begin()
        done = threading.Event()

        def watch() -> None:
            while not done.wait(self.due_in()):
                try:
                    self.poll()
                except Exception:  # warnings made errors (-W error): nowhere to raise it
                    return

        watcher = threading.Thread(target=watch, name="headrace-stall", daemon=True)
        watcher.start()
        arrived = False
        try:
            yield
            arrived = True
        finally:
            done.set()
            watcher.join()
            self.end(arrived=arrived)
