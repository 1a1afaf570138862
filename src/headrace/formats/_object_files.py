"""Files on object storage read by byte ranges: token files, row files, Parquet tables.

A file URL ``s3://bucket/data/train.bin`` is the key ``train.bin`` of the
store ``s3://bucket/data``; a token file's sidecar and Megatron index are keys
beside it. An :class:`ObjectFiles` belongs to one source (a
:class:`TokenSource`, a row source's reader, a :class:`Table`), which opens
(lists, stats, reads headers and sidecars of) its files through it and then
reads them: each store is opened once (with the source's ``store_options``)
and every range read of the source runs on one :class:`~headrace.io.RequestQueue`,
so at most ``in_flight`` ranged GETs are in flight per source, whatever the
number of files or stores. Nothing here is pickled: a worker's copy of the
source opens its own. With a cache (:class:`~headrace.io.ObjectCache`), each
range read is an entry of its own: read from local disk when there is one,
else from the store and then kept (the same block or row group read in the
next epoch is a hit).
"""

from __future__ import annotations

import difflib
import errno
import inspect
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import numpy as np
from numpy.typing import NDArray

from headrace._messages import first_failed
from headrace.errors import ConfigError, HeadraceError, ObjectNotFoundError, StorageError
from headrace.formats._npy import NPY_HEAD
from headrace.io import ObjectCache, RequestQueue, cache_pool, file_url_path
from headrace.io._batch import raise_first, results
from headrace.io._file import url_typo
from headrace.io._object_names import empty_segment, empty_segment_error, refuse_dot_segment
from headrace.io._waits import result, wait_done

if TYPE_CHECKING:
    from headrace.formats._megatron import CheckedIndex
    from headrace.io import ObjectInfo, ObjectStats, ObjectStore

__all__ = [
    "DEFAULT_IN_FLIGHT",
    "PIECE",
    "ObjectFiles",
    "RemoteFile",
    "cache_name",
    "check_in_flight",
    "check_store_options",
    "common_url_root",
    "failures_of",
    "foreign_scheme",
    "joined",
    "named_url",
    "split_object_url",
    "wait_all",
]

DEFAULT_IN_FLIGHT = 64
# One ranged GET reads at most this much: a large range (a window, a row group, an index)
# is many GETs in flight.
PIECE = 8 << 20


def check_in_flight(in_flight: object) -> int:
    """``in_flight`` as an int when it is a Python or NumPy integer >= 1 (``True`` is not
    one); else ConfigError."""
    if (
        isinstance(in_flight, bool | np.bool_)
        or not isinstance(in_flight, int | np.integer)
        or in_flight < 1
    ):
        raise ConfigError(f"in_flight must be an integer >= 1 (got {in_flight!r}).")
    return int(in_flight)


def check_store_options(
    options: Mapping[str, Any] | None,
    *,
    remote: bool,
    where: str | None = None,
    paths: Sequence[object] = (),
) -> dict[str, Any]:
    """A copy of ``options`` (``{}`` for ``None``), checked: a mapping of
    :class:`~headrace.io.ObjectStore` keyword arguments, given only where ``remote``
    (some file is an object URL). ``where`` names the file in the messages; ``paths``
    (the files, when local) are looked at for a URL with a typo in its scheme."""
    at = f"{where}: " if where else ""
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise ConfigError(
            f"{at}store_options must be a mapping of ObjectStore options, e.g. "
            f"{{'region': 'us-east-1'}} (got {type(options).__name__})."
        )
    if options and not remote:
        typo = next(((p, u) for p in (where, *paths) if (u := url_typo(p))), None)
        other = next(filter(None, map(foreign_scheme, (where, *paths))), None)
        if typo:
            hint = f"; {typo[0]!r} is read as a local path: did you mean {typo[1]!r}?"
        elif other:
            hint = other
        else:
            hint = "; leave store_options out for local files"
        raise ConfigError(
            f"{at}store_options apply to object-store URLs only (s3://, gs://, az://, "
            f"http(s)://, file://), not local files{hint}"
        )
    if options:
        from headrace.io import ObjectStore

        known = [
            name
            for name, p in inspect.signature(ObjectStore).parameters.items()
            if p.kind is inspect.Parameter.KEYWORD_ONLY
        ]
        unknown = sorted(str(k) for k in options if k not in known)
        if unknown:
            raise ConfigError(
                f"{at}unknown store_options {unknown}; ObjectStore takes {sorted(known)} "
                "(other obstore settings go in config= or client_options=)."
            )
    return dict(options)


# Where a wasb(s):// URL names its account: container@ACCOUNT.blob.core.windows.net.
_BLOB_HOST = ".blob.core.windows.net"


def foreign_scheme(path: object) -> str | None:
    """What to say of ``path`` when it is a URL of a scheme no store here reads (read as a
    local path, it was "not local files; leave store_options out", which sent a user of
    ``gcs://`` or ``wasbs://`` the wrong way): ``"; X:// is not ... write Y"``, else ``None``.
    Other tools' spellings (gsutil's and fsspec's ``gcs://``, Hadoop's ``wasb(s)://``) are
    told the URL to write instead."""
    if not isinstance(path, str):
        return None
    scheme, sep, rest = path.partition("://")
    if not sep or not scheme.isalnum() or url_typo(path) is not None:
        return None
    said = f"; {path!r} is read as a local path: {scheme}:// is not a URL scheme headrace reads"
    low = scheme.lower()
    if low == "gcs":
        return f"{said}; write 'gs://{rest}' for Google Cloud Storage"
    if low in ("wasb", "wasbs"):
        where, _, key = rest.partition("/")
        container, at, host = where.partition("@")
        account = host.removesuffix(_BLOB_HOST) if at and host.endswith(_BLOB_HOST) else None
        if account:
            return (
                f"{said}; write 'az://{container}/{key}' with store_options "
                f"{{'config': {{'account_name': {account!r}}}}} (or "
                f"'abfss://{container}@{account}.dfs.core.windows.net/{key}') for Azure Blob"
            )
        return f"{said}; write az://container/prefix for Azure Blob"
    return f"{said} (s3://, gs://, az://, abfs(s)://, http(s)://, file://)"


def named_url(url: str) -> str:
    """``url`` with its path as the names it holds, as a store's keys are.

    A ``file://`` URL's path is percent-decoded as ``Path.as_uri()`` encodes it (see
    :func:`headrace.io.file_url_path`); an ``http(s)://`` URL's too: ``a%20b.npy``, as
    a browser or ``urllib.parse.quote`` writes it, names ``a b.npy`` (obstore encodes a
    key once more: it asked for ``a%2520b.npy``, a 404). A query string (a presigned
    URL's signature) is refused: obstore sends a key as a path, ``?`` and all.
    Other schemes' keys are taken as written (``%`` is a character of an S3 key).
    """
    if url.startswith("file://"):
        return f"file://{file_url_path(url)}"
    scheme, sep, rest = url.partition("://")
    if scheme.lower() not in ("http", "https"):
        return url
    host, slash, path = rest.partition("/")
    if "?" in path:
        raise ConfigError(
            f"{url}: an http(s) URL with a query string (a presigned URL?) cannot be read: "
            "obstore sends the name as a path, '?' and all. Read the bucket through its "
            "own scheme (s3://, gs://, az://) with credentials in store_options, or serve "
            "the files at plain URLs"
        )
    return f"{scheme}{sep}{host}{slash}{unquote(path)}"


def refuse_bucketless(url: str) -> None:
    """Refuse an object URL that names no bucket (container, host): ``s3://``, ``gs:///x``.
    Cut at its ``/`` as a prefix or glob, it named the store ``s3:``, in what was said."""
    scheme, sep, rest = url.partition("://")
    if sep and scheme != "file" and not rest.partition("/")[0]:
        raise ConfigError(
            f"{url}: names no bucket (container, host): write {scheme}://bucket/prefix/ "
            "for the files under a prefix, or the URL of one file"
        )


def opened_at(base: str) -> str:
    """Where a store is opened for ``base``, a prefix of :func:`named_url` URLs: a
    ``file://`` one at its local path, decoded already. Opened as a URL, its path was
    percent-decoded once more: ``Path.as_uri()``'s ``pct%2541/`` named ``pct%41/``, then
    read ``pctA/`` where that exists too, another folder's files."""
    return base[len("file://") :] if base.startswith("file://") else base


def split_object_url(url: str, *, named: bool = False) -> tuple[str, str]:
    """``s3://bucket/dir/f.bin`` -> (``s3://bucket/dir``, ``f.bin``): the store and the key
    (of :func:`named_url`: ``file://`` and ``http(s)://`` paths percent-decoded, unless
    ``named`` says ``url`` is one already: decoded twice, ``100%2541`` named ``100A``)."""
    url = url if named else named_url(url)
    scheme, sep, rest = url.partition("://")
    path = rest.partition("/")[2]  # after the bucket (container, host)
    if scheme != "file" and empty_segment(path.removesuffix("/")):
        # Split at its last "/", "d//x.bin" was key "x.bin" of the store "d/": d/x.bin.
        raise empty_segment_error(url, path)
    if scheme not in ("file", "http", "https"):
        refuse_dot_segment(url, path)  # named whole, not as the store's part of it
    head, slash, key = rest.rpartition("/")
    if not sep or not slash or not key or (not head and scheme != "file"):
        raise ConfigError(
            f"{url}: a file URL names one object, like s3://bucket/dir/train.bin "
            "(got no object key)"
        )
    return f"{scheme}://{head or '/'}", key


def common_url_root(urls: Sequence[str], what: str, *, named: bool = False) -> str:
    """The deepest prefix (a bucket or container at least) under which every URL of a
    non-empty list lies; ``what`` names the list in errors (a list that mixes in local
    paths is refused). ``named``: the URLs are :func:`named_url` ones already."""
    from headrace.formats._file_list import is_object_url

    local = [u for u in urls if not is_object_url(u)]
    if local:
        raise ConfigError(
            f"{what} are all local paths or all object URLs; got local {local[:3]} "
            "among object URLs"
        )
    dirs = [split_object_url(u, named=named)[0] for u in urls]
    root = dirs[0]
    for d in dirs[1:]:
        while not (d == root or d.startswith(root + "/")):
            root = root.rpartition("/")[0]
    rest = root.partition("://")[2]
    if not rest.strip("/"):
        raise ConfigError(
            f"object URLs in one list must share a bucket (container, host); got {dirs[0]} "
            f"and {next(d for d in dirs if not d.startswith(dirs[0]))}"
        )
    return root


def wait_all(futures: Sequence[Future[Any]]) -> None:
    """Wait for every future, then raise the first one's error (none still writes after)."""
    results(futures)


def failures_of(futures: Sequence[Future[Any]]) -> list[HeadraceError | None]:
    """Each future's error (``None``: it succeeded), once every one is done (no read
    still writes after): the opens and reads of a dataset's files, whose failures are all
    named (:func:`~headrace._messages.first_failed`), not the first alone. An error not
    a :class:`HeadraceError` (a Ctrl-C, a bug) is raised."""
    wait_done(futures)
    errors = [f.exception() for f in futures]
    raise_first([e for e in errors if e is not None and not isinstance(e, HeadraceError)])
    return [e if isinstance(e, HeadraceError) else None for e in errors]


def cache_name(options: Mapping[str, Any], url: str) -> str:
    """How a cache names an object: its URL and the endpoint serving it
    (``s3://bucket/key`` on two endpoints is two objects)."""
    return f"{options.get('endpoint', options.get('aws_endpoint', ''))}|{url}"


class RemoteFile:
    """Range reads of one object, checked against its size and ETag when opened."""

    __slots__ = (
        "_cache",
        "_expect",
        "_first",
        "_head",
        "_key",
        "_name",
        "_queue",
        "_store",
        "path",
    )

    def __init__(
        self,
        store: ObjectStore,
        key: str,
        url: str,
        expect: ObjectInfo,
        queue: RequestQueue,
        cache: tuple[ObjectCache, str] | None = None,
        first: Callable[[memoryview], None] | None = None,
    ) -> None:
        self.path = url
        self._first = first
        self._head: Future[None] | None = None  # the check of ``first``, once started
        self._store = store
        self._key = key
        self._expect = expect
        self._queue = queue
        self._cache: ObjectCache | None = None if cache is None else cache[0]
        self._name = "" if cache is None else cache[1]

    def read_into(self, out: NDArray[Any], offset: int) -> Future[None]:
        """Start filling ``out`` (any C-contiguous array) with the bytes at ``offset``;
        the future says when it is done. With ``first``, no read is done before the
        object's first ``NPY_HEAD`` bytes pass it: the first read checks them (from its own
        bytes when it starts there, else by a GET of them alongside), and every read
        fails with the error ``first`` raised."""
        if not out.flags.c_contiguous:  # reshape would copy: the bytes would go nowhere
            raise ConfigError(f"read_into needs a C-contiguous buffer (got strides {out.strides})")
        out = out.reshape(-1).view(np.uint8)  # a view: sizes below are in bytes
        read = self._read(out, offset)
        if self._first is None:
            return read
        head = self._head
        if head is None:
            want = min(NPY_HEAD, self._expect.size)
            if offset == 0 and out.size >= want:
                return self._check_head(read, out[:want])
            buf = np.empty(want, np.uint8)
            head = self._check_head(self._read(buf, 0), buf)
        return _after(read, head, self.path)

    def _check_head(self, read: Future[None], head: NDArray[np.uint8]) -> Future[None]:
        """The check of ``head`` once ``read`` has filled it, kept as ``_head`` (before
        the callback is attached: a read that has already failed runs it at once, and
        its reset must not be overwritten by the failed check)."""
        assert self._first is not None
        first = self._first
        done: Future[None] = Future()
        done.set_running_or_notify_cancel()
        self._head = done

        def check(f: Future[None]) -> None:
            try:
                f.result()
            except BaseException as exc:
                # The read failed, not the check: the next read tries again.
                if self._head is done:
                    self._head = None
                done.set_exception(exc)
                return
            try:
                first(head.data)
            except BaseException as exc:  # kept: every later read fails with it
                done.set_exception(exc)
            else:
                done.set_result(None)

        read.add_done_callback(check)
        return done

    def _read(self, out: NDArray[np.uint8], offset: int) -> Future[None]:
        cache, etag = self._cache, self._expect.etag
        if cache is None or not cache.cacheable(etag):
            return self._from_store(out, offset)
        assert etag is not None
        if cache.has(self._name, self._expect.size, etag, offset, out.size):
            # On the cache's own threads: a caller on the I/O pool may be waiting for this.
            return cache_pool().submit(self._from_cache, cache, etag, out, offset)
        # From the store, then kept. The future is done once the entry is written (or
        # not): whoever waits on it may reuse ``out`` then. It cannot be cancelled
        # while ``out`` is being written.
        done: Future[None] = Future()
        done.set_running_or_notify_cancel()

        def keep() -> None:
            try:
                cache.write(self._name, self._expect.size, etag, out, offset)
            finally:
                done.set_result(None)

        def fetched(f: Future[None]) -> None:
            if f.cancelled():
                done.set_exception(
                    StorageError(
                        errno.ECANCELED,
                        f"{self.path}: read of bytes [{offset}, {offset + out.size}) was cancelled",
                    )
                )
            elif (exc := f.exception()) is not None:
                done.set_exception(exc)
            else:
                cache_pool().submit(keep)  # not on the request loop: a disk write may block

        self._from_store(out, offset).add_done_callback(fetched)
        return done

    def _from_store(self, out: NDArray[np.uint8], offset: int) -> Future[None]:
        store, key, expect = self._store, self._key, self._expect
        return self._queue.submit(lambda: store.aread_into(key, offset, out, expect=expect))

    def _from_cache(
        self, cache: ObjectCache, etag: str, out: NDArray[np.uint8], offset: int
    ) -> None:
        size = self._expect.size
        if not cache.read_into(out, self._name, size, etag, offset):
            # A damaged or unreadable entry (removed or warned about): the store has the bytes.
            result(self._from_store(out, offset))
            cache.write(self._name, size, etag, out, offset)

    def read_pieces(self, out: NDArray[np.uint8], offset: int) -> list[Future[None]]:
        """:meth:`read_into` cut into GETs of at most ``PIECE`` bytes, all started."""
        return [self.read_into(out[a : a + PIECE], offset + a) for a in range(0, out.size, PIECE)]


class ObjectFiles:
    """The object stores and the request queue of one source (see the module doc)."""

    def __init__(
        self,
        options: Mapping[str, Any],
        in_flight: int = DEFAULT_IN_FLIGHT,
        *,
        name: str = "headrace-objects",
        cache: ObjectCache | None = None,
    ) -> None:
        self._options = dict(options)
        self.cache = cache
        self.in_flight = check_in_flight(in_flight)  # an int for the queue, NumPy's too
        self._name = name
        self._lock = threading.Lock()
        self._stores: dict[str, ObjectStore] = {}
        self._queue: RequestQueue | None = None
        self._before: ObjectStats | None = None  # what stores closed earlier did

    def _store(self, url: str) -> tuple[ObjectStore, str]:
        base, key = split_object_url(url)
        return self._store_at(opened_at(base)), key

    def _store_at(self, base: str) -> ObjectStore:
        with self._lock:
            store = self._stores.get(base)
            if store is None:
                from headrace.io import ObjectStore

                store = self._stores[base] = ObjectStore(base, **self._options)
        return store

    def listing(self, url: str) -> list[tuple[str, ObjectInfo]]:
        """``(url, info)`` of every object under the prefix ``url``, sorted by key."""
        base = url.rstrip("/")
        return [(f"{base}/{key}", info) for key, info in self._store_at(base).list_info()]

    def listing_upto(self, url: str, limit: int) -> list[tuple[str, ObjectInfo]] | None:
        """:meth:`listing`, or ``None`` (having stopped) once it passes ``limit`` objects."""
        base = url.rstrip("/")
        listed = self._store_at(base).list_info_upto("", limit)
        return None if listed is None else [(f"{base}/{key}", info) for key, info in listed]

    # -- TokenFiles: what open_token_file needs --------------------------------------
    def head(self, path: str, length: int) -> tuple[memoryview, int, str | None]:
        first, info = self.read_start(path, length)
        if not info.size:
            self._refuse_folder(path)
        return first, info.size, info.etag

    def _refuse_folder(self, url: str) -> None:
        """Refuse ``url``, an empty object, where objects are stored under ``url/``: a
        folder's marker, not a file. An Azure Data Lake (hierarchical namespace) directory
        is such a blob, and so is ``x/`` put through obstore on Azure; a prefix named
        without its '/' was read as a token file of 0 bytes ("needs a dtype"), where on
        S3 or GCS it is "no such object", told to end with '/'. One LIST, of empty
        objects only."""
        store, key = self._store(url)
        under = store.list_info_upto(key + "/", 1)
        if under is None or under:
            raise ObjectNotFoundError(
                errno.EISDIR,
                f"{url}: an empty object that marks a folder (objects are stored under "
                f"{url}/, as under an Azure Data Lake directory), not a file",
            )

    def closest_beside(self, url: str) -> str | None:
        """The URL beside the prefix ``url`` (among its parent's first 1,000 objects) whose
        name is closest to its own, if close: what a misspelt prefix likely meant. Looked
        into on error paths only; ``None`` where there is none, or no parent to list."""
        parent, _, name = url.rstrip("/").rpartition("/")
        if parent.endswith(":/"):  # a bucket: nothing above it to list
            return None
        try:
            listed = self.listing_upto(parent, 1000)
        except HeadraceError:  # not allowed to list the parent: no guess, the error stands
            return None
        names = sorted({u[len(parent) + 1 :].split("/", 1)[0] for u, _ in listed or []})
        close = difflib.get_close_matches(name, names, n=1, cutoff=0.8)
        return f"{parent}/{close[0]}" if close else None

    def info(self, url: str) -> ObjectInfo:
        store, key = self._store(url)
        return store.stat(key)  # ObjectNotFoundError / PermissionDeniedError name the URL

    def infos(self, urls: Sequence[str]) -> list[ObjectInfo]:
        """:meth:`info` of every URL, the HEADs on the request queue: up to ``in_flight``
        at once, where one after another took a round trip each (a list of 1,000 shard
        URLs at 50 ms: 50 s). All finish before the first error is raised, the others named
        (:func:`~headrace._messages.first_failed`)."""
        queue = self._request_queue()

        def head(url: str) -> Future[ObjectInfo]:
            store, key = self._store(url)
            return queue.submit(lambda: store.astat(key))

        futures = [head(u) for u in urls]
        # Every URL that failed named, not the first alone (a list of shards, 3 deleted).
        failed = [(u, e) for u, e in zip(urls, failures_of(futures), strict=True) if e is not None]
        if failed:
            raise first_failed(failed, "failed to open too")
        return [f.result() for f in futures]

    def read(self, path: str) -> bytes | None:
        """The whole object, ``None`` if there is none.

        One GET when it fits in a ``PIECE`` (the ranged response says how big the
        object is, so no HEAD first); a larger one's other pieces are then all in
        flight at once, each checked against the size and ETag the first one saw.
        """
        try:
            first, info = self.read_start(path, PIECE)
        except ObjectNotFoundError:
            return None
        if info.size == len(first):
            return bytes(first)
        out = np.empty(info.size, np.uint8)
        out[: len(first)] = np.frombuffer(first, np.uint8)
        rest = self.open(path, info.size, info.etag).read_pieces(out[len(first) :], len(first))
        wait_all(rest)
        return out.tobytes()

    def index(self, path: str, bin_size: int) -> CheckedIndex | None:
        """The Megatron index at ``path``, checked in pieces (``None``: none there)."""
        # Imported here: that module reads through this one's ObjectFiles.
        from headrace.formats._megatron_remote import remote_index

        return remote_index(self, path, bin_size)

    def read_start(self, url: str, length: int) -> tuple[memoryview, ObjectInfo]:
        """The object's first ``length`` bytes (all of it when shorter), its size and ETag:
        one GET (ObjectNotFoundError / PermissionDeniedError name the URL)."""
        store, key = self._store(url)
        return store.get_first(key, length)

    # -- block reads -------------------------------------------------------------------
    def open(
        self,
        url: str,
        size: int,
        etag: str | None,
        first: Callable[[memoryview], None] | None = None,
        *,
        cached: bool = True,
    ) -> RemoteFile:
        """Range reads of ``url`` as it was (``size``, ``etag``); ``first`` checks the
        object's first bytes when a read starts there (see :meth:`RemoteFile.read_into`).
        ``cached=False``: not through the cache (bytes read once, such as an index's check)."""
        from headrace.io import ObjectInfo

        store, key = self._store(url)
        cache = None if self.cache is None or not cached else (self.cache, self.cache_key(url))
        return RemoteFile(
            store, key, url, ObjectInfo(size, etag), self._request_queue(), cache, first
        )

    def cache_key(self, url: str) -> str:
        """How the cache names the object ``url`` (:func:`cache_name`)."""
        return cache_name(self._options, url)

    def _request_queue(self) -> RequestQueue:
        with self._lock:
            if self._queue is None:
                self._queue = RequestQueue(self.in_flight, name=self._name)
            return self._queue

    def stats(self) -> ObjectStats:
        """Every store's counters together, since this was made (closing keeps them);
        ``max_in_flight_observed`` counts range reads."""
        with self._lock:
            stores = list(self._stores.values())
            queue = self._queue
            before = self._before
        return _merge([s.stats for s in stores], queue, before)

    def close(self) -> None:
        """Close the stores and the queue; using this again opens new ones."""
        with self._lock:
            queue, self._queue = self._queue, None
            stores, self._stores = list(self._stores.values()), {}
        if queue is not None:
            queue.close()
        for store in stores:
            store.close()
        with self._lock:  # counted once closed: requests the close cancelled are settled
            self._before = _merge([s.stats for s in stores], queue, self._before)


def _after(read: Future[None], head: Future[None], path: str) -> Future[None]:
    """``read``, done once ``head`` is too (the reader may reuse ``out`` then), failing
    with the head's error first."""
    if head.done() and not head.cancelled() and head.exception() is None:
        return read
    return joined([head, read], path)


def joined(futures: list[Future[None]], what: str) -> Future[None]:
    """One future done when all of ``futures`` are, with the first one's failure in
    their order. A cancelled one is a StorageError saying which bytes (``what``):
    asking a cancelled future for its exception raises, which in a done-callback
    would leave this future unsettled, and its reader waiting for ever."""
    if len(futures) == 1:
        return futures[0]
    out: Future[None] = Future()
    out.set_running_or_notify_cancel()
    left = [len(futures)]
    lock = threading.Lock()

    def done(_: Future[None]) -> None:
        with lock:
            left[0] -= 1
            if left[0]:
                return
        for f in futures:
            if f.cancelled():
                out.set_exception(StorageError(errno.ECANCELED, f"{what}: a read was cancelled"))
                return
            if (exc := f.exception()) is not None:
                out.set_exception(exc)
                return
        out.set_result(None)

    if not futures:
        out.set_result(None)
    for f in futures:
        f.add_done_callback(done)
    return out


def _merge(
    parts: list[ObjectStats], queue: RequestQueue | None, before: ObjectStats | None
) -> ObjectStats:
    from headrace.io import ObjectStats

    out = ObjectStats() if before is None else before.copy()
    for s in parts:
        # Per store, in flight at once counts single GETs; the queue's figure below counts
        # the source's range reads across all its stores.
        s = s.copy()
        s.max_in_flight_observed = 0
        out.add(s)
    if queue is not None:
        out.max_in_flight_observed = max(
            out.max_in_flight_observed, queue.stats.max_in_flight_observed
        )
    return out
