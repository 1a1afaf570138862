"""Object storage (S3, GCS, Azure, HTTP, local files) through obstore.

One :class:`ObjectStore` per bucket/prefix URL. Whole-object and range reads,
coalesced multi-range reads, listing, and :meth:`ObjectStore.get_many`, which
keeps up to ``max_in_flight`` requests in flight on a private event loop and
returns results in request order. Every request is retried with bounded,
jittered exponential backoff on 5xx, throttling, timeouts, dropped connections
and truncated bodies; 403 and 404 are not retried (``headrace.io._object_tries``).
Every error leaves as one of ``headrace.errors``, naming the object URL and byte
range. Every request runs on the store's loop, the calling thread waiting: Ctrl-C
or :meth:`ObjectStore.close` stops one stalled in flight at once. A body shorter
than asked for is never returned as data (``headrace.io._object_info``).
"""

from __future__ import annotations

import asyncio
import errno
import threading
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from concurrent.futures import CancelledError
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from headrace.io._obstore_missing import obstore_missing

try:
    import obstore as obs
    import obstore.exceptions as obx
except ModuleNotFoundError as exc:  # the optional extra: say which one
    raise obstore_missing(exc) from exc

from headrace._closing import Closing
from headrace.errors import (
    ConfigError,
    ObjectNotFoundError,
    ReadEOFError,
    StorageError,
    TransientStorageError,
)
from headrace.io import _exit
from headrace.io._loop import LoopThread
from headrace.io._object_info import (
    ObjectInfo,
    Request,
    check_encoding,
    check_range,
    drop_folder_markers,
    eof_with_size,
    info_of,
    item_key,
    normalize,
    short_read,
)
from headrace.io._object_listing import alist_fanned, fans_out
from headrace.io._object_names import check_key, named_once, unlistable
from headrace.io._object_open import open_store
from headrace.io._object_stats import ObjectStats
from headrace.io._object_tries import Tries
from headrace.io._put import takes_metadata
from headrace.io._ranges import at_least
from headrace.io._retry import RetryPolicy, classify, is_panic, summarize
from headrace.io._runtime_fork import check_runtime

__all__ = [
    "DEFAULT_COALESCE",
    "DEFAULT_MAX_IN_FLIGHT",
    "ObjectInfo",
    "ObjectStats",
    "ObjectStore",
    "Request",
]

DEFAULT_MAX_IN_FLIGHT = 64
DEFAULT_COALESCE = 1024 * 1024

T = TypeVar("T")


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
        self._keeps_metadata = takes_metadata(self._store)
        self._lock = threading.Lock()
        self._tries = Tries(self.retry)
        self._loop: LoopThread | None = None
        self._closed = False

    # -- opening and closing --------------------------------------------------------------

    def close(self) -> None:
        """Stop the private event loop (if one started) and drop obstore's store, whose
        pool held a connection for each request once in flight, for as long as this
        object lived (a closed source keeps its stores). Idempotent."""
        self._closed = self._tries.closed = True
        self._store = None  # after _closed: _live() never hands out None
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

    def _live(self, key: str | None = None) -> Any:
        """obstore's store, for a request of ``key`` (checked: obstore would read a key
        with an empty path segment as another object's)."""
        store = self._store  # read first: close() sets _closed before it drops the store
        if self._closed or store is None:
            raise StorageError(f"{self.url}: store is closed")
        check_runtime(self.url)
        if key is not None:
            check_key(self.url, key)
        return store

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
        return self._tries.stats()

    def reset_stats(self) -> None:
        """Zero the counters (the in-flight limit, which is the store's state, stays)."""
        self._tries.reset_stats()

    def where(self, key: str, offset: int | None = None, length: int | None = None) -> str:
        """``url/key`` and, for a range, ``bytes [a, b)``: how messages name a read."""
        name = f"{self.url}/{key}"
        if offset is None or length is None:
            return name
        return f"{name}, bytes [{offset}, {offset + length})"

    # -- writes (headrace.io._put) -----------------------------------------------------------

    @property
    def keeps_metadata(self) -> bool:
        """Whether objects here carry user metadata (S3, GCS, Azure: yes; files, HTTP: no)."""
        return self._keeps_metadata

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
        """The object's size and entity tag (one HEAD).

        Like every read here, run on the store's loop (the caller waits), not as a
        blocking call in the caller's thread: Ctrl-C, or :meth:`close` from another
        thread, then stops a request stalled in flight at once, where a blocking one
        held its thread (a loader opening a source on a hung endpoint) for its timeout
        and every retry."""
        self._live(key)
        return self._read(self.astat(key), self.where(key))

    async def astat(self, key: str) -> ObjectInfo:
        """:meth:`stat` on the event loop, so many HEADs can be in flight at once."""
        store = self._live(key)
        meta = await self._tries.arun(
            self.where(key), lambda: obs.head_async(store, key), lambda _: 0
        )
        return info_of(meta)

    # What an error message says of the object's size: one HEAD, and one more if the first
    # failed at once, as on a pooled connection the server closed after its error answer.
    # ``None`` if both fail; the short read is reported either way.

    async def _asize_or_none(self, key: str) -> int | None:
        for _ in range(2):
            # A request outside the store's tries, counted all the same; at exit (when the
            # tries would be held) the message goes without the size.
            if not _exit.begins():
                return None
            try:
                return int((await obs.head_async(self._live(), key))["size"])
            except Exception as exc:
                if not classify(exc, "")[1]:
                    break
            finally:
                _exit.end()
        return None

    def get(self, key: str) -> memoryview:
        """The whole object (zero-copy over obstore's buffer)."""
        return self.get_with_info(key)[0]

    def get_with_info(
        self, key: str, *, expect: ObjectInfo | None = None
    ) -> tuple[memoryview, ObjectInfo]:
        """The whole object, and the size and ETag of the version that was read.

        With ``expect`` (a listing's size and ETag), a body of another size with the
        same ETag (or none) is a body cut short, retried with the policy's backoff and
        counted as a retry: a proxy or store that cuts a body and sends a
        ``Content-Length`` that agrees cannot be caught otherwise. Another ETag is
        returned as read, for the caller to refuse.

        Run on the store's loop (the caller waits), not as a blocking call in the
        caller's thread: :meth:`close` then cancels a GET stalled in flight at once,
        where a blocking one held its thread for its timeout and every retry.
        """
        self._live(key)
        return self._read(self._aget_whole(key, expect), self.where(key))

    async def _aget_whole(
        self, key: str, expect: ObjectInfo | None = None
    ) -> tuple[memoryview, ObjectInfo]:
        store = self._live(key)
        where = self.where(key)

        async def once() -> tuple[memoryview, ObjectInfo]:
            result = await obs.get_async(store, key)
            check_encoding(where, result.attributes)
            data = memoryview(await result.bytes_async())
            start, end = result.range
            if len(data) != end - start:  # kept: a server's body is input (chunked, proxies)
                raise short_read(where, len(data), end - start, None, 0)
            info = info_of(result.meta)
            if (
                expect is not None
                and len(data) != expect.size
                and (not expect.etag or not info.etag or info.etag == expect.etag)
            ):
                tag = (
                    f"ETag {expect.etag} unchanged"
                    if expect.etag and info.etag
                    else "no ETag to tell it from a changed object"
                )
                raise TransientStorageError(
                    f"{where}: response body was cut short ({len(data)} of the "
                    f"{expect.size} bytes listed, {tag})"
                )
            return data, info

        return await self._tries.arun(where, once, lambda r: len(r[0]))

    def get_first(self, key: str, length: int) -> tuple[memoryview, ObjectInfo]:
        """The object's first ``length`` bytes (all of it when shorter), its size and ETag.

        One ranged GET where :meth:`stat` then :meth:`get_range` take two: the
        response's ``Content-Range`` carries the object's size. An empty object has
        no byte to start a range at (S3 answers 416), so it costs a second,
        whole-object GET.
        """
        _, length = check_range(0, length)
        if length == 0:
            raise ConfigError(f"{self.where(key)}: get_first needs a length >= 1 (got 0).")
        store = self._live(key)
        where = self.where(key)
        ranged_where = self.where(key, 0, length)  # its GET is ranged: say which bytes

        async def once(ranged: bool) -> tuple[memoryview, ObjectInfo]:
            if ranged:
                result = await obs.get_async(store, key, options={"range": (0, length)})
            else:
                result = await obs.get_async(store, key)
            check_encoding(ranged_where if ranged else where, result.attributes)
            info = info_of(result.meta)
            data = memoryview(await result.bytes_async())
            start, end = result.range
            if len(data) != end - start:
                at = ranged_where if ranged else where
                raise short_read(at, len(data), end - start, info.size, end)
            return data, info

        def nbytes(r: tuple[memoryview, ObjectInfo]) -> int:
            return len(r[0])

        async def first() -> tuple[memoryview, ObjectInfo]:
            try:
                return await self._tries.arun(ranged_where, lambda: once(True), nbytes)
            except ObjectNotFoundError as exc:  # no object at all: a range says nothing more
                raise ObjectNotFoundError(str(exc).replace(ranged_where, where, 1)) from exc
            except ReadEOFError:  # no byte 0: the object is empty
                data, info = await self._tries.arun(where, lambda: once(False), nbytes)
                return data[:length], info

        return self._read(first(), ranged_where)

    def get_range(self, key: str, offset: int, length: int) -> memoryview:
        """``length`` bytes at ``offset``; :class:`ReadEOFError` if the object ends first."""
        offset, length = check_range(offset, length)
        self._live(key)
        if length == 0:
            return memoryview(b"")
        return self._read(self._aget_one((key, offset, length)), self.where(key, offset, length))

    def get_ranges(
        self, key: str, ranges: Sequence[tuple[int, int]], *, coalesce: int = DEFAULT_COALESCE
    ) -> list[memoryview]:
        """Many ``(offset, length)`` ranges of one object, in the order given.

        obstore merges ranges less than ``coalesce`` bytes apart into one request
        and runs up to 10 requests at once; on a remote store this turns dense
        small ranges into a few large GETs.
        """
        ranges = [check_range(offset, length) for offset, length in ranges]
        coalesce = at_least("coalesce", coalesce, 0)
        store = self._live(key)
        wanted = [(o, n) for o, n in ranges if n > 0]
        if not wanted:
            return [memoryview(b"") for _ in ranges]
        lo = min(o for o, _ in wanted)
        hi = max(o + n for o, n in wanted)
        where = f"{self.url}/{key}, {len(wanted)} ranges within bytes [{lo}, {hi})"

        async def once() -> list[memoryview]:
            try:
                parts = await obs.get_ranges_async(
                    store,
                    key,
                    starts=[o for o, _ in wanted],
                    lengths=[n for _, n in wanted],
                    coalesce=coalesce,
                )
            except BaseException as exc:
                # obstore panics slicing a coalesced body that ends before a range: one
                # past the object's end (said as get_range says it), or a body cut short.
                panic = is_panic(exc)
                size = await self._asize_or_none(key) if panic else None
                past = [(o, n) for o, n in wanted if size is not None and o + n > size]
                if panic and not past:
                    # A body shorter than asked: retried as any cut short is. (The async
                    # call's panic keeps none of its words, by which classify() knew it.)
                    raise TransientStorageError(
                        f"{where}: response body was cut short (obstore panicked: {summarize(exc)})"
                    ) from exc
                if size is None or not past:
                    raise
                o, n = past[0]
                got = min(n, max(0, size - o))
                raise short_read(self.where(key, o, n), got, n, size, o + n) from exc
            views = [memoryview(p) for p in parts]
            for (o, n), v in zip(wanted, views, strict=True):
                if len(v) != n:
                    size = await self._asize_or_none(key)
                    raise short_read(self.where(key, o, n), len(v), n, size, o + n)
            return views

        job = self._tries.arun(where, once, lambda vs: sum(len(v) for v in vs))
        it = iter(self._read(job, where))
        return [next(it) if n > 0 else memoryview(b"") for _, n in ranges]

    async def aread_into(
        self, key: str, offset: int, out: Any, *, expect: ObjectInfo | None = None
    ) -> None:
        """Fill the writable buffer ``out`` with the bytes at ``offset`` (a coroutine).

        Runs on any event loop (obstore drives the request; the loop only awaits
        it), with this store's retries. With ``expect`` (from :meth:`stat` or a listing),
        a response whose object size or entity tag differs is refused: the object
        was replaced or resized since, and its bytes must not be mixed with those
        read before; one deleted since is said to be gone since it was listed or opened,
        not merely missing. ``out`` is only written with a complete, checked body.
        """
        dest = np.frombuffer(out, dtype=np.uint8)  # raises unless ``out`` is a flat buffer
        offset, length = check_range(offset, dest.size)
        if length == 0:
            return
        if dest.flags.writeable is False:
            raise ConfigError(f"{self.where(key, offset, length)}: the output buffer is read-only")
        store = self._live(key)
        where = self.where(key, offset, length)

        async def once() -> int:
            result = await obs.get_async(store, key, options={"range": (offset, offset + length)})
            check_encoding(where, result.attributes)
            size, etag = info_of(result.meta)
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
                raise short_read(where, got, length, size, offset + length)
            # NumPy drops the GIL for a large copy; the loop's other requests go on.
            np.copyto(dest, np.frombuffer(memoryview(data), dtype=np.uint8))
            return got

        try:
            await self._tries.arun(where, once, lambda n: n)
        except ObjectNotFoundError as exc:
            if expect is None or ": no such object (" not in str(exc):
                raise  # never opened, or its bucket (container) is gone: said as such
            # Said as a local source says a file deleted mid-run (gone_error), not as the
            # store's bare 404. Not "when opened": a table's footer read, its opening,
            # finds an object deleted since it was listed (``expect`` is a listing's).
            raise ObjectNotFoundError(
                errno.ENOENT,
                f"{where}: no such object now; it was there when listed or opened "
                f"({expect.size} bytes"
                + (f", ETag {expect.etag}" if expect.etag else "")
                + "), so it was deleted or moved while the run was reading it. Put it back "
                "to go on, or open a new source over the objects there now "
                '(docs/long-runs.md, "Data that changes under a running job")',
            ) from exc
        except ReadEOFError as exc:
            if expect is not None and offset + length <= expect.size:
                raise ReadEOFError(
                    f"{where}: the object changed while open: it had {expect.size} bytes, "
                    f"now it ends before this range ({exc})"
                ) from exc
            raise

    # -- many reads, many in flight ---------------------------------------------------------

    async def _aget_one(self, request: tuple[str, int, int] | str) -> memoryview:
        if isinstance(request, str):
            return (await self._aget_whole(request))[0]
        key, offset, length = request
        store = self._live(key)
        if length == 0:
            return memoryview(b"")
        where = self.where(key, offset, length)

        async def ranged() -> memoryview:
            got = await obs.get_async(store, key, options={"range": (offset, offset + length)})
            check_encoding(where, got.attributes)
            data = memoryview(await got.bytes_async())
            if len(data) != length:
                size = await self._asize_or_none(key)
                raise short_read(where, len(data), length, size, offset + length)
            return data

        try:
            return await self._tries.arun(where, ranged, len)
        except ReadEOFError as exc:
            better = eof_with_size(exc, where, await self._asize_or_none(key), offset + length)
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
        max_in_flight = at_least("max_in_flight", max_in_flight, 1)
        normalized = [normalize(r) for r in requests]
        if not normalized:
            return []
        self._live()
        return self._run(self._aget_many(normalized, max_in_flight), "get_many")

    def _run(self, job: Coroutine[Any, Any, T], what: str) -> T:
        """``job`` run on the store's loop; a close() meanwhile is said as such."""
        return self._wait(job, f"{self.url}: store was closed during {what}")

    def _read(self, job: Coroutine[Any, Any, T], where: str) -> T:
        """``job``, a read of ``where`` (:meth:`where`), run on the store's loop."""
        return self._wait(job, f"{where}: the store was closed during the read")

    def _wait(self, job: Coroutine[Any, Any, T], closed: str) -> T:
        try:
            loop = self._loop_thread()
        except BaseException:
            job.close()  # never started: no "was never awaited" warning
            raise
        try:
            return loop.run(job)
        except (CancelledError, RuntimeError) as exc:
            if not self._closed:
                raise
            raise StorageError(closed) from exc

    def list_info(self, prefix: str = "") -> list[tuple[str, ObjectInfo]]:
        """``(key, size and ETag)`` of every object under ``prefix``, sorted by key."""
        store = self._live(prefix.removesuffix("/") or None)

        where = self.where(prefix)

        async def once() -> list[tuple[str, ObjectInfo]]:
            out: list[tuple[str, ObjectInfo]] = []
            try:
                async for chunk in obs.list(store, prefix or None, chunk_size=1000):
                    out.extend((m["path"], info_of(m)) for m in chunk)
            except obx.InvalidPathError as exc:
                raise unlistable(where, exc) from exc
            return sorted(out)

        if fans_out(self.url):  # many ranges at once (_object_listing)
            listed = self._run(alist_fanned(store, prefix, self._alist_try), "a listing")
            listed.sort(key=item_key)
        else:  # on the loop, as every read: Ctrl-C or close() stops it (see stat)
            listed = self._run(self._tries.arun(where, once, lambda _: 0), "a listing")
        return drop_folder_markers(named_once(where, listed), prefix)

    async def _alist_try(self, what: str, once: Callable[[], Awaitable[T]]) -> T:
        """One request of a listing (``what``: its prefix or range of keys), retried."""
        where = self.where(what)

        async def named() -> T:
            try:
                return await once()
            except obx.InvalidPathError as exc:
                raise unlistable(where, exc) from exc

        return await self._tries.arun(where, named, lambda _: 0)

    def list_info_upto(self, prefix: str, limit: int) -> list[tuple[str, ObjectInfo]] | None:
        """:meth:`list_info`, or ``None`` once the listing passes ``limit`` keys: it stops
        there, so a prefix far larger than the caller wants costs about ``limit / 1000``
        pages (requests of 1,000 keys each), not all of them."""
        store = self._live(prefix.removesuffix("/") or None)

        where = self.where(prefix)

        async def once() -> list[tuple[str, ObjectInfo]] | None:
            out: list[tuple[str, ObjectInfo]] = []
            try:
                # Pages are fetched as the stream is iterated: leaving it stops the listing.
                async for chunk in obs.list(store, prefix or None, chunk_size=1000):
                    out.extend((m["path"], info_of(m)) for m in chunk)
                    if len(out) > limit:
                        return None
            except obx.InvalidPathError as exc:
                raise unlistable(where, exc) from exc
            return drop_folder_markers(named_once(where, sorted(out)), prefix)

        return self._run(self._tries.arun(where, once, lambda _: 0), "a listing")

    def folder_markers(self, keys: Sequence[str]) -> list[str]:
        """Those of ``keys``, empty objects a listing named, that are folder markers.

        A console's "Create folder" stores an empty object ``x/``, which obstore lists as
        ``x``; beside ``x/a.jpg`` the listing drops it, but an empty folder's marker
        cannot be told there from an empty object ``x``. A HEAD of ``x`` tells: a 404
        (the marker is ``x/``). One HEAD a key, up to 64 in flight; listings hold few
        empty objects. A key whose HEAD fails otherwise raises, naming it."""
        if not keys:
            return []
        self._live()

        async def gone(key: str, gate: asyncio.Semaphore) -> bool:
            async with gate:
                try:
                    await self.astat(key)
                except ObjectNotFoundError:
                    return True
                return False

        async def every() -> list[bool]:
            gate = asyncio.Semaphore(DEFAULT_MAX_IN_FLIGHT)
            return list(await asyncio.gather(*(gone(k, gate) for k in keys)))

        found = self._run(every(), "HEADs of empty objects")
        return [k for k, marker in zip(keys, found, strict=True) if marker]

    def list(self, prefix: str = "") -> list[tuple[str, int]]:
        """``(key, size)`` of every object under ``prefix``, sorted by key."""
        return [(key, info.size) for key, info in self.list_info(prefix)]
