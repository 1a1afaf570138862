"""The tries of an object store's requests: the retry loop, the in-flight limit, the counters.

Every request an :class:`~headrace.io._objects.ObjectStore` makes runs through
:meth:`Tries.run` (blocking) or :meth:`Tries.arun` (on an event loop): each try
waits for a place under the store's in-flight limit (``headrace.io._throttle``),
is counted in :class:`~headrace.io._object_stats.ObjectStats`, and on failure is
mapped by :func:`~headrace.io._retry.classify` and retried after the policy's
backoff, or raised as one of ``headrace.errors``. Both loops share the failure
handling, so a blocking and an async read give up in the same way.

A retried try is logged as a warning naming the request (URL and bytes), what it
met, the try count and the wait. Connection failures (refused, reset, dropped) are
the store's, not a request's: every request in flight meets them, each retried by
time (``connect_retry_s``), and a line per try per request was 1,671 lines in 50 s
of faults. They are said as a spell (:class:`_Down`): its first failure, then at
most one line every ``SAY_DOWN_EVERY_S`` with the tries and requests that failed
since the last line, and its end: a request that connected again once none is
failing any more, or the first that gave up (its final error). Every other
failed try of the spell goes to the DEBUG level, as said before.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import fields
from typing import TypeVar

from headrace.errors import HeadraceError, TransientStorageError
from headrace.io import _exit
from headrace.io import _in_flight as in_flight
from headrace.io._object_stats import ObjectStats
from headrace.io._retry import (
    RetryPolicy,
    classify,
    is_connection_failure,
    is_panic,
    is_throttle,
)
from headrace.io._throttle import InFlightLimit

log = logging.getLogger("headrace")

__all__ = ["Tries"]

T = TypeVar("T")


def _longer(policy: RetryPolicy) -> str:
    """``policy`` with twice the attempts, each wait up to twice as long, as code to paste.

    Waits of 0 become the defaults' (twice 0 waits no longer), and the fields given
    other than the delays are kept: the code replaces the policy, not only its waits.
    """
    args = [f"attempts={2 * policy.attempts}"]
    args.append(f"max_delay_s={2 * policy.max_delay_s or _DEFAULT.max_delay_s:g}")
    if not policy.base_delay_s:
        args.append(f"base_delay_s={_DEFAULT.base_delay_s:g}")
    args.extend(_given(policy, "attempts", "base_delay_s", "max_delay_s"))
    return f"RetryPolicy({', '.join(args)})"


def _given(policy: RetryPolicy, *but: str) -> list[str]:
    """``policy``'s fields other than the defaults and ``but``, as ``name=value``."""
    return [
        f"{f.name}={getattr(policy, f.name)!r}"
        for f in fields(policy)
        if f.name not in but and getattr(policy, f.name) != getattr(_DEFAULT, f.name)
    ]


_DEFAULT = RetryPolicy()

# How often a spell of connection failures is said while it lasts (its other tries: DEBUG).
SAY_DOWN_EVERY_S = 10.0

# A request's mark (``tries[3]``) before it met a connection failure.
_UP = -1
# A request's tries so far: (attempt, throttles, started, mark); see Tries._failed.
_Request = tuple[int, int, float, int]


class _Down:
    """A store's connection failures, said as a spell (see the module doc); guarded by
    :attr:`Tries._lock`. ``line`` numbers the lines said; a request's mark is the
    line it was last counted under, so ``requests`` counts each once a line."""

    __slots__ = ("failing", "line", "requests", "said_at", "spell", "tries")

    def __init__(self) -> None:
        self.line = 0
        self.said_at = -float("inf")  # perf_counter() of the last line
        self.spell = False  # a spell's first line said, its end not yet
        self.failing = 0  # requests that met a connection failure and have not ended
        self.tries = 0  # failed tries not said since the last line ...
        self.requests = 0  # ... and the requests they were of

    def since(self) -> str:
        """The tries not said since the last line, to add to the next one."""
        if not self.tries:
            return ""
        return (
            f"; since the last line, {self.tries} more tries of {self.requests} requests "
            "failed to connect"
        )

    def said(self, now: float) -> None:
        self.line += 1
        self.said_at = now
        self.tries = self.requests = 0


class Tries:
    """Runs requests with ``policy``'s retries and counts their tries.

    The store sets ``closed`` when its owner closes it: a closed store starts no
    retry. A flag, not a callback into the store: that would make a cycle, and a
    store dropped without ``close()`` would keep its loop thread until the next
    garbage collection instead of stopping it at once.
    """

    def __init__(self, policy: RetryPolicy) -> None:
        self.policy = policy
        self.closed = False
        self._lock = threading.Lock()
        self._stats = ObjectStats()
        self._limit = InFlightLimit(adapt=policy.adapt_in_flight)
        self._throttled_before = 0
        self._rng = random.Random()
        self._pid = os.getpid()
        self._down = _Down()

    # -- stats ------------------------------------------------------------------------------

    def stats(self) -> ObjectStats:
        """A snapshot of the counters."""
        with self._lock:
            out = self._stats.copy()
        limit = self._limit.stats()
        out.throttled = limit.throttled - self._throttled_before
        out.in_flight_limit, out.lowest_in_flight_limit = limit.limit, limit.lowest
        return out

    def reset_stats(self) -> None:
        """Zero the counters (the in-flight limit, which is the store's state, stays)."""
        with self._lock:
            self._stats = ObjectStats()
            self._throttled_before = self._limit.stats().throttled

    def _begin(self) -> float:
        with self._lock:
            s = self._stats
            s.attempts += 1
            s.in_flight += 1
            s.max_in_flight_observed = max(s.max_in_flight_observed, s.in_flight)
        return time.perf_counter()

    def _end(self, t0: float, nbytes: int | None, *, retry: bool, cancelled: bool = False) -> None:
        dt = time.perf_counter() - t0
        _exit.end()
        with self._lock:
            s = self._stats
            s.in_flight -= 1
            if nbytes is not None:
                s.requests += 1
                s.bytes += nbytes
                s.latencies_s.append(dt)
            elif retry:
                s.retries += 1
            elif cancelled:
                s.cancelled += 1
            else:
                s.failures += 1

    # -- retry loops (sync and async share _failed, classify() and the policy) -------------

    def _failed(
        self, exc: BaseException, where: str, t0: float, ticket: int, tries: _Request
    ) -> tuple[float, _Request]:
        """Count a failed try; raise the final error, or return the delay before the next.

        ``tries`` is ``(attempt, throttles, started, mark)``, returned updated for
        the next try; ``started`` is the ``perf_counter()`` of the request's first
        try, ``mark`` its place in the store's connection failures (:class:`_Down`).
        With ``adapt_in_flight``, a throttle is the store's flow control, not a
        failure: it does not use an attempt (the limit on tries in flight probes
        the store's capacity by now and then exceeding it), up to
        ``4 * attempts`` throttles per request. A refused or reset connection
        is retried past ``attempts`` while the next try would start within
        ``connect_retry_s`` of the first. Every retry backs off exponentially
        in all the tries made so far.
        """
        attempt, throttles, started, mark = tries
        policy = self.policy
        if self._pid != os.getpid():
            # A forked child (a store made before the workers were forked) had its
            # parent's jitter, as had its siblings: all of them retried together. Its
            # parent's connection failures in flight are not its own.
            self._pid, self._rng = os.getpid(), random.Random()
            with self._lock:
                self._down = _Down()
        throttled = is_throttle(exc)
        self._limit.release(ticket, throttled=throttled)
        err, transient = classify(exc, where)
        free = throttled and policy.adapt_in_flight and throttles < 4 * policy.attempts
        delay = policy.delay_s(attempt + throttles, self._rng)
        now = time.perf_counter()
        spent = now - started
        by_time = (
            transient
            and not throttled
            and attempt >= policy.attempts
            and policy.connect_retry_s > 0
            and is_connection_failure(exc)
        )
        # A closed store tries no more: a read its owner gave up on (close() under a
        # stalled GET) ends with this try instead of waiting out the retries.
        again = (
            transient
            and not self.closed
            and (
                free
                or attempt < policy.attempts
                or (by_time and spent + delay <= policy.connect_retry_s)
            )
        )
        self._end(t0, None, retry=again)
        if again:
            if not throttled:
                # Said as it happens: a stalled GET takes a timeout per try, and five
                # of them (151 s with the default policy) passed without a word.
                of = (
                    f"{attempt} ({spent:.1f} s of connect_retry_s={policy.connect_retry_s:g} s)"
                    if by_time
                    else f"{attempt} of {policy.attempts}"
                )
                line = (
                    f"headrace: {err}; try {of} failed after {now - t0:.1f} s, trying again "
                    f"in {delay:.1f} s"
                )
                if is_connection_failure(exc):
                    level, line, mark = self._connect_failed(line, mark, now)
                    log.log(level, "%s", line)
                else:
                    log.warning("%s", line)
            return delay, (
                (attempt, throttles + 1, started, mark)
                if free
                else (attempt + 1, throttles, started, mark)
            )
        if transient:
            also = f", {throttles} throttled tries" if throttles else ""
            if self.closed:
                why = f"the store was closed{also}"
            else:
                why = f"gave up after {attempt} attempts{also} in {spent:.1f} s"
                if by_time:
                    why += (
                        ": connection failures are retried for up to "
                        f"connect_retry_s={policy.connect_retry_s:g} s"
                    )
                elif throttled:
                    why += (
                        ": the store throttled for longer than a request waits (4 x "
                        "attempts throttled tries, each up to max_delay_s apart)"
                        if policy.adapt_in_flight
                        else ": the store throttled (adapt_in_flight=False: every "
                        "throttled try is an attempt)"
                    )
                    why += f'; to wait longer, pass store_options={{"retry": {_longer(policy)}}}'
                elif str(err).startswith(f"{where}: timed out"):  # classify()'s words
                    # A large object on a slow link times out every try alike.
                    patient = [f"timeout_s={4 * policy.timeout_s:g}", *_given(policy, "timeout_s")]
                    why += (
                        f": each try is cut at timeout_s={policy.timeout_s:g} s, connect and "
                        "transfer together; for a slow store, or a read that takes longer, "
                        f'pass store_options={{"retry": RetryPolicy({", ".join(patient)})}}'
                    )
                else:
                    # A 5xx or a body cut short every try: with the default policy five
                    # tries span about 0.5 s, less than a busy store's bad moment, and
                    # the message said only that it gave up.
                    why += (
                        ": the store failed every try; for a store that fails for longer, "
                        f'pass store_options={{"retry": {_longer(policy)}}}; a Loader '
                        "resumes from its last state_dict() once the store answers"
                    )
            err = TransientStorageError(f"{err} ({why})")
        try:
            raise err from exc
        finally:
            # Its traceback holds this frame, whose locals held it: a cycle through the
            # caller's frames and store, so a source dropped without close() after a
            # miss (a token file's sidecar not found) kept its connections and thread
            # until the cyclic collector ran, never under gc.disable().
            del err, exc

    def _connect_failed(self, line: str, mark: int, now: float) -> tuple[int, str, int]:
        """A request's connection failure, to be retried: said (the first of a spell, or
        the first after ``SAY_DOWN_EVERY_S``, with the counts since the last line) or
        counted and left to DEBUG. Returns the level, the line and the request's mark."""
        d = self._down
        with self._lock:
            if mark == _UP:
                d.failing += 1
            if now - d.said_at < SAY_DOWN_EVERY_S:
                d.tries += 1
                if mark != d.line:
                    d.requests += 1
                return logging.DEBUG, line, d.line
            line += d.since()
            if not d.spell:
                line += (
                    f"; connection failures of this store are said at most every "
                    f"{SAY_DOWN_EVERY_S:g} s while they last (each try: DEBUG level)"
                )
            d.spell = True
            d.said(now)
            return logging.WARNING, line, 0  # counted again at its next try not said

    def _through(self, where: str, tries: _Request) -> None:
        """A request that met a connection failure succeeded."""
        attempt, throttles, started, _ = tries
        now = time.perf_counter()
        line = (
            f"headrace: {where}: connected again, on try {attempt + throttles} after "
            f"{now - started:.1f} s"
        )
        self._ended(line, now, failed=False)

    def _ended(self, end: str | None, now: float, *, failed: bool = True) -> None:
        """A request that met a connection failure ended (``end``: its final error, or
        how it connected, as a line; ``None``: cancelled): the spell's end is said, by
        the first request to give up, or by one that connected once none fails any
        more, with the counts since the last line."""
        d = self._down
        with self._lock:
            d.failing -= 1
            if end is None or not d.spell or (not failed and d.failing):
                return
            d.spell = False
            line = end + d.since()
            d.said(now)
        log.warning("%s", line)

    def _settle(self, ticket: int, t0: float, nbytes: int | None) -> None:
        """Count out a try that succeeded (``nbytes``) or was abandoned (``None``)."""
        self._limit.release(ticket)
        self._end(t0, nbytes, retry=False, cancelled=nbytes is None)

    def run(self, where: str, once: Callable[[], T], size_of: Callable[[T], int]) -> T:
        key = in_flight.begin(where, 0, -1)  # every try, and the waits between them
        try:
            return self._run(where, once, size_of)
        finally:
            in_flight.end(key)

    def _run(self, where: str, once: Callable[[], T], size_of: Callable[[T], int]) -> T:
        tries: _Request = (1, 0, time.perf_counter(), _UP)
        try:
            while True:
                ticket = self._limit.acquire_blocking()
                if not _exit.begins():
                    # Held at exit: its slot goes back first, or an exit handler's request to
                    # this store could wait for it.
                    self._limit.release(ticket)
                    _exit.hold(where)
                t0 = self._begin()
                try:
                    result = once()
                except BaseException as exc:
                    # Cancelled or interrupted: still count it out. A panic of obstore's is
                    # a failure of the request (a body cut short), said and retried as such.
                    if not isinstance(exc, Exception) and not is_panic(exc):
                        self._settle(ticket, t0, None)
                        raise
                    delay, tries = self._failed(exc, where, t0, ticket, tries)
                    time.sleep(delay)
                    continue
                self._settle(ticket, t0, size_of(result))
                if tries[3] != _UP:
                    self._through(where, tries)
                    tries = (*tries[:3], _UP)
                return result
        except BaseException as exc:
            if tries[3] != _UP:
                said = isinstance(exc, HeadraceError)  # not a cancel: its final error
                self._ended(f"headrace: {exc}" if said else None, time.perf_counter())
            raise

    async def arun(
        self, where: str, once: Callable[[], Awaitable[T]], size_of: Callable[[T], int]
    ) -> T:
        key = in_flight.begin(where, 0, -1)
        try:
            return await self._arun(where, once, size_of)
        finally:
            in_flight.end(key)
            await _exit.agrace()

    async def _arun(
        self, where: str, once: Callable[[], Awaitable[T]], size_of: Callable[[T], int]
    ) -> T:
        tries: _Request = (1, 0, time.perf_counter(), _UP)
        try:
            while True:
                ticket = await self._limit.acquire()
                if not _exit.begins():
                    self._limit.release(ticket)
                    await _exit.ahold(where)
                t0 = self._begin()
                try:
                    result = await once()
                except BaseException as exc:
                    # Cancelled or interrupted: still count it out. A panic of obstore's is
                    # a failure of the request (a body cut short), said and retried as such.
                    if not isinstance(exc, Exception) and not is_panic(exc):
                        self._settle(ticket, t0, None)
                        raise
                    delay, tries = self._failed(exc, where, t0, ticket, tries)
                    await asyncio.sleep(delay)
                    continue
                self._settle(ticket, t0, size_of(result))
                if tries[3] != _UP:
                    self._through(where, tries)
                    tries = (*tries[:3], _UP)
                return result
        except BaseException as exc:
            if tries[3] != _UP:
                said = isinstance(exc, HeadraceError)  # not a cancel: its final error
                self._ended(f"headrace: {exc}" if said else None, time.perf_counter())
            raise
