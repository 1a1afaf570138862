"""Object storage (S3, GCS, Azure, HTTP, local files) through obstore.

One :class:`ObjectStore` per bucket/prefix URL. Whole-object and range reads,
coalesced multi-range reads, listing, and :meth:`ObjectStore.get_many`, which
keeps up to ``max_in_flight`` requests in flight on a private event loop and
returns results in request order. Every request is retried with bounded,
jittered exponential backoff on 5xx, throttling, timeouts, dropped connections
and truncated bodies; 403 and 404 are not retried. Every error leaves as one of
``headrace.errors``, naming the object URL and byte range. A body shorter than
asked for is never returned as data.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import CancelledError
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import numpy as np
import obstore as obs

from headrace._closing import Closing
from headrace.errors import (
    ConfigError,
    ObjectNotFoundError,
    ReadEOFError,
    StorageError,
    TransientStorageError,
)
from headrace.io._loop import LoopThread
from headrace.io._object_open import open_store
from headrace.io._retry import RetryPolicy, classify, is_throttle
from headrace.io._throttle import InFlightLimit

log = logging.getLogger("headrace")

__all__ = [
    "DEFAULT_COALESCE",
    "DEFAULT_MAX_IN_FLIGHT",
    "ObjectInfo",
    "ObjectStats",
    "ObjectStore",
    "Request",
]

T = TypeVar("T")

DEFAULT_MAX_IN_FLIGHT = 64
DEFAULT_COALESCE = 1024 * 1024
_LATENCY_SAMPLES = 1 << 16

Request = str | tuple[str, int, int]
"""A whole object by key, or ``(key, offset, length)``."""


class ObjectInfo(NamedTuple):
    """An object's size and entity tag (``None`` where the store gives none).

    The tag is without the quotes HTTP puts around it: Azure and GCS list an
    object's tag bare but send it quoted in a response's ``ETag`` header, and a
    tag from a listing must compare equal to the one a later GET sees.
    """

    size: int
    etag: str | None


def _info(meta: Mapping[str, Any]) -> ObjectInfo:
    """``ObjectInfo`` of obstore's metadata (from a HEAD, a GET or a listing)."""
    etag = meta.get("e_tag")
    if etag is not None and len(etag) >= 2 and etag[0] == etag[-1] == '"':
        etag = etag[1:-1]
    return ObjectInfo(int(meta["size"]), etag)


@dataclass(slots=True)
class ObjectStats:
    """What an :class:`ObjectStore` did since it opened (or :meth:`ObjectStore.reset_stats`).

    ``requests`` counts calls that succeeded (a ``get_ranges`` call is one,
    however many HTTP requests obstore made for it); ``attempts`` counts tries,
    so ``retries = attempts - requests - failures``. ``latencies_s`` holds the
    latest 65,536 successful request latencies. ``throttled`` counts tries the
    store answered "slow down" (429, 503); ``in_flight_limit`` is the limit on
    tries in flight that those answers set (``None``: never throttled), and
    ``lowest_in_flight_limit`` its lowest value.
    """

    requests: int = 0
    attempts: int = 0
    retries: int = 0
    failures: int = 0
    bytes: int = 0
    in_flight: int = 0
    max_in_flight_observed: int = 0
    throttled: int = 0
    in_flight_limit: float | None = None
    lowest_in_flight_limit: float | None = None
    latencies_s: deque[float] = field(default_factory=lambda: deque(maxlen=_LATENCY_SAMPLES))

    def copy(self) -> ObjectStats:
        out = ObjectStats(
            requests=self.requests,
            attempts=self.attempts,
            retries=self.retries,
            failures=self.failures,
            bytes=self.bytes,
            in_flight=self.in_flight,
            max_in_flight_observed=self.max_in_flight_observed,
            throttled=self.throttled,
            in_flight_limit=self.in_flight_limit,
            lowest_in_flight_limit=self.lowest_in_flight_limit,
        )
        out.latencies_s.extend(self.latencies_s)
        return out

    def add(self, other: ObjectStats) -> None:
        """Count ``other``'s requests in these (``max_in_flight_observed``: the larger)."""
        self.requests += other.requests
        self.attempts += other.attempts
        self.retries += other.retries
        self.failures += other.failures
        self.bytes += other.bytes
        self.in_flight += other.in_flight
        self.max_in_flight_observed = max(self.max_in_flight_observed, other.max_in_flight_observed)
        self.throttled += other.throttled
        self.in_flight_limit = _lower(self.in_flight_limit, other.in_flight_limit)
        self.lowest_in_flight_limit = _lower(
            self.lowest_in_flight_limit, other.lowest_in_flight_limit
        )
        self.latencies_s.extend(other.latencies_s)


def _lower(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else min(a, b)


def _check_range(offset: int, length: int) -> None:
    if not isinstance(offset, int) or not isinstance(length, int) or offset < 0 or length < 0:
        raise ConfigError(
            f"A byte range needs integer offset >= 0 and length >= 0 "
            f"(got offset={offset!r}, length={length!r})."
        )


def _normalize(request: Request) -> tuple[str, int, int] | str:
    if isinstance(request, str):
        return request
    if isinstance(request, tuple) and len(request) == 3 and isinstance(request[0], str):
        _check_range(request[1], request[2])
        return request
    raise ConfigError(f"A request is a key or a (key, offset, length) tuple (got {request!r}).")


def _short_read(where: str, got: int, want: int, size: int | None, end: int) -> StorageError:
    """A read returned ``got`` of ``want`` bytes: past the end, or a body cut short."""
    if size is not None and end > size:
        return ReadEOFError(
            f"{where}: read past the end of the object (object has {size} bytes, "
            f"range ends at {end}; {got} of {want} bytes available)"
        )
    return TransientStorageError(
        f"{where}: response body was cut short ({got} of {want} bytes"
        + ("" if size is None else f"; object has {size} bytes")
        + ")"
    )


def _eof_with_size(exc: ReadEOFError, where: str, size: int | None, end: int) -> ReadEOFError:
    """The same EOF error, saying how big the object is when the server did not."""
    if size is None or "object has" in str(exc):
        return exc
    return ReadEOFError(
        f"{where}: read past the end of the object (object has {size} bytes, range ends at {end})"
    )


class ObjectStore(Closing):
    """Reads (and writes) objects under one URL: ``s3://bucket/prefix``, ``gs://``, ``az://``,
    ``http(s)://``, ``file:///dir`` or a plain local directory.

    S3 options (``endpoint``, ``region``, ``access_key_id``,
    ``secret_access_key``, ``path_style``) cover MinIO, Ceph and any
    S3-compatible endpoint (an ``http://`` endpoint or URL allows plain HTTP
    unless ``allow_http=False``); anything else obstore understands goes in
    ``config`` (store keys) or ``client_options`` (HTTP client, e.g.
    ``allow_http``). Keys are relative to the URL's prefix.

    ``az://container/prefix`` takes obstore's Azure keys in ``config``
    (``account_name``, ``account_key``, ...) and ``endpoint``; with
    ``config={"use_emulator": True}`` the endpoint is where Azurite listens
    (obstore alone would ignore it and dial 127.0.0.1:10000).
    ``gs://bucket/prefix`` takes obstore's GCS keys in ``config``. The S3-only
    options are refused for other schemes.
    """

    def __init__(
        self,
        url: str | Path,
        *,
        endpoint: str | None = None,
        region: str | None = None,
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        path_style: bool | None = None,
        allow_http: bool | None = None,
        config: Mapping[str, Any] | None = None,
        client_options: Mapping[str, Any] | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.retry = retry if retry is not None else RetryPolicy()
        self.url, self._store = open_store(
            url,
            endpoint=endpoint,
            region=region,
            access_key_id=access_key_id,
            secret_access_key=secret_access_key,
            path_style=path_style,
            allow_http=allow_http,
            config=config,
            client_options=client_options,
            timeout_s=self.retry.timeout_s,
        )
        self._lock = threading.Lock()
        self._stats = ObjectStats()
        self._limit = InFlightLimit(adapt=self.retry.adapt_in_flight)
        self._throttled_before = 0
        self._rng = random.Random()
        self._loop: LoopThread | None = None
        self._closed = False

    # -- opening and closing --------------------------------------------------------------

    def close(self) -> None:
        """Stop the private event loop (if one started). Idempotent."""
        self._closed = True
        # Under the lock: a get_many starting a loop right now assigns it
        # first, so it is closed here rather than left running.
        with self._lock:
            loop, self._loop = self._loop, None
        if loop is not None:
            loop.close()

    def __repr__(self) -> str:
        return f"ObjectStore({self.url!r})"

    @property
    def closed(self) -> bool:
        return self._closed

    def _live(self) -> Any:
        if self._closed:
            raise StorageError(f"{self.url}: store is closed")
        return self._store

    def _loop_thread(self) -> LoopThread:
        with self._lock:
            if self._closed:
                raise StorageError(f"{self.url}: store is closed")
            if self._loop is None or not self._loop.usable:
                self._loop = LoopThread()
                self._loop.stop_with(self)
            return self._loop

    # -- stats ------------------------------------------------------------------------------

    @property
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

    def _end(self, t0: float, nbytes: int | None, *, retry: bool) -> None:
        dt = time.perf_counter() - t0
        with self._lock:
            s = self._stats
            s.in_flight -= 1
            if nbytes is not None:
                s.requests += 1
                s.bytes += nbytes
                s.latencies_s.append(dt)
            elif retry:
                s.retries += 1
            else:
                s.failures += 1

    def where(self, key: str, offset: int | None = None, length: int | None = None) -> str:
        """``url/key`` and, for a range, ``bytes [a, b)``: how messages name a read."""
        name = f"{self.url}/{key}"
        if offset is None or length is None:
            return name
        return f"{name}, bytes [{offset}, {offset + length})"

    # -- retry loops (sync and async share classify() and the policy) ---------------------

    def _failed(
        self, exc: Exception, where: str, t0: float, ticket: int, tries: tuple[int, int]
    ) -> tuple[float, tuple[int, int]]:
        """Count a failed try; raise the final error, or return the delay before the next.

        ``tries`` is ``(attempt, throttles)``, returned updated for the next try.
        With ``adapt_in_flight``, a throttle is the store's flow control, not a
        failure: it does not use an attempt (the limit on tries in flight probes
        the store's capacity by now and then exceeding it), up to
        ``4 * attempts`` throttles per request. Every retry backs off
        exponentially in all the tries made so far.
        """
        attempt, throttles = tries
        throttled = is_throttle(exc)
        self._limit.release(ticket, throttled=throttled)
        err, transient = classify(exc, where)
        free = throttled and self.retry.adapt_in_flight and throttles < 4 * self.retry.attempts
        # A closed store tries no more: a read its owner gave up on (close() under a
        # stalled GET) ends with this try instead of waiting out the retries.
        again = transient and not self._closed and (free or attempt < self.retry.attempts)
        self._end(t0, None, retry=again)
        if again:
            delay = self.retry.delay_s(attempt + throttles, self._rng)
            if not throttled:
                # Said as it happens: a stalled GET takes a timeout per try, and five
                # of them (151 s with the default policy) passed without a word.
                log.warning(
                    "headrace: %s; try %d of %d failed after %.1f s, trying again in %.1f s",
                    err,
                    attempt,
                    self.retry.attempts,
                    time.perf_counter() - t0,
                    delay,
                )
            return delay, ((attempt, throttles + 1) if free else (attempt + 1, throttles))
        if transient:
            also = f", {throttles} throttled tries" if throttles else ""
            why = "the store was closed" if self._closed else f"gave up after {attempt} attempts"
            err = TransientStorageError(f"{err} ({why}{also})")
        raise err from exc

    def _retrying(self, where: str, once: Callable[[], T], size_of: Callable[[T], int]) -> T:
        tries = (1, 0)
        while True:
            ticket = self._limit.acquire_blocking()
            t0 = self._begin()
            try:
                result = once()
            except Exception as exc:
                delay, tries = self._failed(exc, where, t0, ticket, tries)
                time.sleep(delay)
                continue
            except BaseException:  # cancelled or interrupted: still count it out
                self._limit.release(ticket)
                self._end(t0, None, retry=False)
                raise
            self._limit.release(ticket)
            self._end(t0, size_of(result), retry=False)
            return result

    async def _aretrying(
        self, where: str, once: Callable[[], Awaitable[T]], size_of: Callable[[T], int]
    ) -> T:
        tries = (1, 0)
        while True:
            ticket = await self._limit.acquire()
            t0 = self._begin()
            try:
                result = await once()
            except Exception as exc:
                delay, tries = self._failed(exc, where, t0, ticket, tries)
                await asyncio.sleep(delay)
                continue
            except BaseException:  # cancelled or interrupted: still count it out
                self._limit.release(ticket)
                self._end(t0, None, retry=False)
                raise
            self._limit.release(ticket)
            self._end(t0, size_of(result), retry=False)
            return result

    # -- writes (headrace.io._put) -----------------------------------------------------------

    @property
    def keeps_metadata(self) -> bool:
        """Whether objects here carry user metadata (S3, GCS, Azure: yes; files, HTTP: no)."""
        from headrace.io._put import takes_metadata

        return takes_metadata(self._store)

    def put_file(
        self,
        key: str,
        path: str | Path,
        *,
        metadata: Mapping[str, str] | None = None,
        on_bytes: Callable[[int], None] | None = None,
    ) -> ObjectInfo:
        """Write the local file ``path`` as object ``key`` (retried whole); its size and ETag.

        Streamed: a file larger than 8 MiB goes up as a multipart upload with at
        most 4 parts (32 MiB) in memory. ``metadata`` becomes the object's user
        metadata (:attr:`keeps_metadata` stores only); ``on_bytes(n)`` hears of the
        bytes sent (negative when a failed attempt starts over).
        """
        from headrace.io._put import put_file

        return put_file(self, key, path, metadata=metadata, on_bytes=on_bytes)

    def attributes(self, key: str) -> dict[str, str]:
        """The object's attributes and user metadata (one request, no body)."""
        from headrace.io._put import get_attributes

        return get_attributes(self, key)

    # -- single reads -----------------------------------------------------------------------

    def size(self, key: str) -> int:
        """The object's size in bytes (one HEAD)."""
        return self.stat(key).size

    def stat(self, key: str) -> ObjectInfo:
        """The object's size and entity tag (one HEAD)."""
        store = self._live()
        meta = self._retrying(self.where(key), lambda: obs.head(store, key), lambda _: 0)
        return _info(meta)

    async def astat(self, key: str) -> ObjectInfo:
        """:meth:`stat` on the event loop, so many HEADs can be in flight at once."""
        store = self._live()
        meta = await self._aretrying(
            self.where(key), lambda: obs.head_async(store, key), lambda _: 0
        )
        return _info(meta)

    # What an error message says of the object's size: one HEAD, and one more if the first
    # failed at once, as on a pooled connection the server closed after its error answer.
    # ``None`` if both fail; the short read is reported either way.

    def _size_or_none(self, key: str) -> int | None:
        for _ in range(2):
            try:
                return int(obs.head(self._live(), key)["size"])
            except Exception as exc:
                if not classify(exc, "")[1]:
                    break
        return None

    async def _asize_or_none(self, key: str) -> int | None:
        for _ in range(2):
            try:
                return int((await obs.head_async(self._live(), key))["size"])
            except Exception as exc:
                if not classify(exc, "")[1]:
                    break
        return None

    def get(self, key: str) -> memoryview:
        """The whole object (zero-copy over obstore's buffer)."""
        return self.get_with_info(key)[0]

    def get_with_info(self, key: str) -> tuple[memoryview, ObjectInfo]:
        """The whole object, and the size and ETag of the version that was read.

        Run on the store's loop (the caller waits), not as a blocking call in the
        caller's thread: :meth:`close` then cancels a GET stalled in flight at once,
        where a blocking one held its thread for its timeout and every retry.
        """
        store = self._live()
        where = self.where(key)

        async def once() -> tuple[memoryview, ObjectInfo]:
            result = await obs.get_async(store, key)
            data = memoryview(await result.bytes_async())
            start, end = result.range
            if len(data) != end - start:  # kept: a server's body is input (chunked, proxies)
                raise _short_read(where, len(data), end - start, None, 0)
            return data, _info(result.meta)

        try:
            return self._loop_thread().run(self._aretrying(where, once, lambda r: len(r[0])))
        except CancelledError:
            if self._closed:
                raise StorageError(f"{where}: the store was closed during the read") from None
            raise

    def get_first(self, key: str, length: int) -> tuple[memoryview, ObjectInfo]:
        """The object's first ``length`` bytes (all of it when shorter), its size and ETag.

        One ranged GET where :meth:`stat` then :meth:`get_range` take two: the
        response's ``Content-Range`` carries the object's size. An empty object has
        no byte to start a range at (S3 answers 416), so it costs a second,
        whole-object GET.
        """
        _check_range(0, length)
        if length == 0:
            raise ConfigError(f"{self.where(key)}: get_first needs a length >= 1 (got 0).")
        store = self._live()
        where = self.where(key)
        ranged_where = self.where(key, 0, length)  # its GET is ranged: say which bytes

        def once(ranged: bool) -> tuple[memoryview, ObjectInfo]:
            if ranged:
                result = obs.get(store, key, options={"range": (0, length)})
            else:
                result = obs.get(store, key)
            info = _info(result.meta)
            data = memoryview(result.bytes())
            start, end = result.range
            if len(data) != end - start:
                at = ranged_where if ranged else where
                raise _short_read(at, len(data), end - start, info.size, end)
            return data, info

        def nbytes(r: tuple[memoryview, ObjectInfo]) -> int:
            return len(r[0])

        try:
            return self._retrying(ranged_where, lambda: once(True), nbytes)
        except ObjectNotFoundError as exc:  # no object at all: a range says nothing more
            raise ObjectNotFoundError(str(exc).replace(ranged_where, where, 1)) from exc
        except ReadEOFError:  # no byte 0: the object is empty
            data, info = self._retrying(where, lambda: once(False), nbytes)
            return data[:length], info

    def get_range(self, key: str, offset: int, length: int) -> memoryview:
        """``length`` bytes at ``offset``; :class:`ReadEOFError` if the object ends first."""
        _check_range(offset, length)
        store = self._live()
        if length == 0:
            return memoryview(b"")
        where = self.where(key, offset, length)

        def once() -> memoryview:
            data = memoryview(obs.get_range(store, key, start=offset, length=length))
            if len(data) != length:
                raise _short_read(
                    where, len(data), length, self._size_or_none(key), offset + length
                )
            return data

        try:
            return self._retrying(where, once, len)
        except ReadEOFError as exc:
            better = _eof_with_size(exc, where, self._size_or_none(key), offset + length)
            if better is exc:
                raise
            raise better from exc

    def get_ranges(
        self, key: str, ranges: Sequence[tuple[int, int]], *, coalesce: int = DEFAULT_COALESCE
    ) -> list[memoryview]:
        """Many ``(offset, length)`` ranges of one object, in the order given.

        obstore merges ranges less than ``coalesce`` bytes apart into one request
        and runs up to 10 requests at once; on a remote store this turns dense
        small ranges into a few large GETs.
        """
        for offset, length in ranges:
            _check_range(offset, length)
        store = self._live()
        wanted = [(o, n) for o, n in ranges if n > 0]
        if not wanted:
            return [memoryview(b"") for _ in ranges]
        lo = min(o for o, _ in wanted)
        hi = max(o + n for o, n in wanted)
        where = f"{self.url}/{key}, {len(wanted)} ranges within bytes [{lo}, {hi})"

        def once() -> list[memoryview]:
            parts = obs.get_ranges(
                store,
                key,
                starts=[o for o, _ in wanted],
                lengths=[n for _, n in wanted],
                coalesce=coalesce,
            )
            views = [memoryview(p) for p in parts]
            for (o, n), v in zip(wanted, views, strict=True):
                if len(v) != n:
                    raise _short_read(
                        self.where(key, o, n), len(v), n, self._size_or_none(key), o + n
                    )
            return views

        views = self._retrying(where, once, lambda vs: sum(len(v) for v in vs))
        it = iter(views)
        return [next(it) if n > 0 else memoryview(b"") for _, n in ranges]

    async def aread_into(
        self, key: str, offset: int, out: Any, *, expect: ObjectInfo | None = None
    ) -> None:
        """Fill the writable buffer ``out`` with the bytes at ``offset`` (a coroutine).

        Runs on any event loop (obstore drives the request; the loop only awaits
        it), with this store's retries. With ``expect`` (from :meth:`stat`), a
        response whose object size or entity tag differs is refused: the object
        was replaced or resized since, and its bytes must not be mixed with those
        read before. ``out`` is only written with a complete, checked body.
        """
        dest = np.frombuffer(out, dtype=np.uint8)  # raises unless ``out`` is a flat buffer
        length = dest.size
        _check_range(offset, length)
        if length == 0:
            return
        if dest.flags.writeable is False:
            raise ConfigError(f"{self.where(key, offset, length)}: the output buffer is read-only")
        store = self._live()
        where = self.where(key, offset, length)

        async def once() -> int:
            result = await obs.get_async(store, key, options={"range": (offset, offset + length)})
            size, etag = _info(result.meta)
            if expect is not None and (
                size != expect.size or (expect.etag and etag and etag != expect.etag)
            ):
                raise StorageError(
                    f"{where}: the object changed while open: it had {expect.size} bytes"
                    + (f" (ETag {expect.etag})" if expect.etag else "")
                    + f", now {size}"
                    + (f" (ETag {etag})" if etag else "")
                    + "; refusing to mix its old and new bytes (reopen the source)"
                )
            data = await result.bytes_async()
            got = memoryview(data).nbytes
            if got != length:
                raise _short_read(where, got, length, size, offset + length)
            # NumPy drops the GIL for a large copy; the loop's other requests go on.
            np.copyto(dest, np.frombuffer(memoryview(data), dtype=np.uint8))
            return got

        try:
            await self._aretrying(where, once, lambda n: n)
        except ReadEOFError as exc:
            if expect is not None and offset + length <= expect.size:
                raise ReadEOFError(
                    f"{where}: the object changed while open: it had {expect.size} bytes, "
                    f"now it ends before this range ({exc})"
                ) from exc
            raise

    # -- many reads, many in flight ---------------------------------------------------------

    async def _aget_one(self, request: tuple[str, int, int] | str) -> memoryview:
        store = self._live()
        if isinstance(request, str):
            key = request
            where = self.where(key)

            async def whole() -> memoryview:
                result = await obs.get_async(store, key)
                data = memoryview(await result.bytes_async())
                start, end = result.range
                if len(data) != end - start:  # kept: a server's body is input
                    raise _short_read(where, len(data), end - start, None, 0)
                return data

            return await self._aretrying(where, whole, len)
        key, offset, length = request
        if length == 0:
            return memoryview(b"")
        where = self.where(key, offset, length)

        async def ranged() -> memoryview:
            data = memoryview(await obs.get_range_async(store, key, start=offset, length=length))
            if len(data) != length:
                size = await self._asize_or_none(key)
                raise _short_read(where, len(data), length, size, offset + length)
            return data

        try:
            return await self._aretrying(where, ranged, len)
        except ReadEOFError as exc:
            better = _eof_with_size(exc, where, await self._asize_or_none(key), offset + length)
            if better is exc:
                raise
            raise better from exc

    async def _aget_many(
        self, requests: list[tuple[str, int, int] | str], max_in_flight: int
    ) -> list[memoryview]:
        results: list[memoryview | None] = [None] * len(requests)
        errors: dict[int, BaseException] = {}
        # One shared iterator: each worker takes the next request when it is free, so at
        # most max_in_flight run at once and a slow GET never holds up the others.
        todo = iter(range(len(requests)))

        async def worker() -> None:
            for i in todo:
                if errors:
                    return  # stop starting new reads; the ones in flight finish
                try:
                    results[i] = await self._aget_one(requests[i])
                except Exception as exc:
                    errors[i] = exc

        await asyncio.gather(*(worker() for _ in range(min(max_in_flight, len(requests)))))
        if errors:
            first = min(errors)
            err = errors[first]
            if len(errors) > 1:
                err.add_note(f"{len(errors) - 1} more of {len(requests)} requests also failed")
            raise err
        return [r for r in results if r is not None]

    def get_many(
        self, requests: Sequence[Request], *, max_in_flight: int = DEFAULT_MAX_IN_FLIGHT
    ) -> list[memoryview]:
        """Fetch every request with up to ``max_in_flight`` in flight; results in request order.

        A request is a key (the whole object) or ``(key, offset, length)``. If any
        fails, no new request starts, those in flight finish, and the error of the
        earliest failed request (in request order) is raised.
        """
        if (
            isinstance(max_in_flight, bool)
            or not isinstance(max_in_flight, int)
            or max_in_flight < 1
        ):
            raise ConfigError(f"max_in_flight must be an integer >= 1 (got {max_in_flight!r}).")
        normalized = [_normalize(r) for r in requests]
        if not normalized:
            return []
        self._live()
        try:
            return self._loop_thread().run(self._aget_many(normalized, max_in_flight))
        except (CancelledError, RuntimeError) as exc:
            if not self._closed:
                raise
            raise StorageError(f"{self.url}: store was closed during get_many") from exc

    def list_info(self, prefix: str = "") -> list[tuple[str, ObjectInfo]]:
        """``(key, size and ETag)`` of every object under ``prefix``, sorted by key."""
        store = self._live()

        def once() -> list[tuple[str, ObjectInfo]]:
            stream = obs.list(store, prefix or None, chunk_size=1000)
            return sorted((m["path"], _info(m)) for chunk in stream for m in chunk)

        return self._retrying(self.where(prefix), once, lambda _: 0)

    def list(self, prefix: str = "") -> list[tuple[str, int]]:
        """``(key, size)`` of every object under ``prefix``, sorted by key."""
        return [(key, info.size) for key, info in self.list_info(prefix)]
