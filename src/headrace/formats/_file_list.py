"""The files of a dataset, listed once, and how to fetch one whole file.

A dataset is a local directory, a list of local paths, an object-store URL
prefix (``s3://bucket/prefix``, ``gs://``, ``file://``...) or a list of object
URLs in one bucket. Listing is the
only work done up front; keys are sorted so the same data always gives the
same file numbers. Every fetch is checked against the listed size, so a body
cut short (or an object replaced behind our back) is an error, never
garbage handed to a decoder.
"""

from __future__ import annotations

import errno
import glob
import os
import posixpath
import stat
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from headrace.errors import (
    ConfigError,
    DataError,
    ObjectNotFoundError,
    ReadEOFError,
    StorageError,
)
from headrace.formats._file_walk import (
    drop_hidden,
    folder_suffixes,
    is_hidden,
    keep,
    local_version,
    none_found,
    other_formats,
    other_skipped,
    refuse_empty,
    refuse_glob_cycles,
    refuse_webdataset_urls,
    regular_stats,
    suffixes,
    walk,
)
from headrace.formats._files import EXTENSIONS, format_of
from headrace.formats._object_files import check_store_options, wait_all
from headrace.formats._packed_names import PackedNames, PackedSizes, PackedTags
from headrace.formats._url_glob import ESCAPE_HINT, local_pattern
from headrace.io import (
    LocalFile,
    ObjectCache,
    RangeReader,
    ReaderConfig,
    RequestQueue,
    deep_io_pool,
)
from headrace.io import _in_flight as in_flight
from headrace.io._cache import Spans
from headrace.io._file import missing_hint, open_error
from headrace.io._mounts import local_cache_refused
from headrace.io._open_files import gone_error
from headrace.io._ranges import merge_ranges

__all__ = ["FileList", "LocalRead", "is_object_url", "list_files", "refuse_repeats"]

LocalRead = Literal["pread", "odirect"]
_REMOTE = ("s3://", "s3a://", "gs://", "az://", "azure://", "abfs://", "abfss://", "adl://",
           "http://", "https://", "memory://", "file://")  # fmt: skip


def is_object_url(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` names an object-store URL (read through obstore), not a local path."""
    return isinstance(path, str) and path.startswith(_REMOTE)


@dataclass(slots=True, kw_only=True)
class FileList:
    """Sorted keys and sizes, and a ``fetch(i)`` for file ``i``.

    ``url`` is the object-store URL or local root the keys are relative to
    (``""`` for a list of absolute paths). The keys, sizes and versions are packed
    (:mod:`~headrace.formats._packed_names`: a few arrays, not an object a file), as
    every worker copy of a source holds them.
    """

    url: str
    keys: PackedNames
    sizes: PackedSizes
    remote: bool
    _fetch: Callable[[int], Any] = field(repr=False)
    _close: Callable[[], None] = field(repr=False)
    #: each file's version as listed: an object's ETag (``None`` when the store gave
    #: none); a local file's device, inode and mtime (``_file_walk.local_version``)
    etags: PackedTags
    store: Any = None  # the ObjectStore, for object-store datasets
    #: what a folder's or prefix's listing left out as hidden (``_file_walk.is_hidden``):
    #: files with the format's extension (``._x.jpg``) and folders not walked
    #: (``.ipynb_checkpoints/``; on object storage, the files in them); and one of them
    hidden: int = 0
    hidden_example: str | None = None
    #: files of a folder's listing with the format's extension that are not regular
    #: files (a FIFO, socket or device), left out; and one of them, with its kind
    special: int = 0
    special_example: str | None = None
    #: files of a folder's or prefix's listing of another known format (``.png`` files
    #: beside the ``.jpg`` ones a JPEG source reads), left out; and what to say of them
    other: int = 0
    other_said: str = ""
    cache: ObjectCache | None = None
    #: keys are relative to a folder or prefix the caller named (not a list or a glob's
    #: matches): their first folder is a class folder (``labels="folders"``)
    rooted: bool = False
    #: the folders directly in a folder or prefix given, less hidden ones (class
    #: folders, those that hold no file too: on object storage, those the listing
    #: shows, by a marker or an object of another format; ``()`` for a list or a glob)
    folders: tuple[str, ...] = ()
    #: an object-store glob's: the folders its listing showed below each folder it went
    #: through, by URL (the class folders beside its matches, ``labels="folders"``)
    beside: Mapping[str, frozenset[str]] = field(default_factory=dict, repr=False)
    #: how the cache names object ``i`` (object-store datasets with a cache)
    cache_key: Callable[[int], str] | None = field(default=None, repr=False)

    def __len__(self) -> int:
        return len(self.keys)

    def __repr__(self) -> str:
        # The dataclass repr printed every key, size and ETag: megabytes for a
        # large dataset, from a stray print(src.files) or a notebook cell.
        keys = list(self.keys) if len(self.keys) <= 4 else [*self.keys[:2], "...", self.keys[-1]]
        size = int(self.sizes.array.sum())
        return (
            f"FileList(url={self.url!r}, {len(self.keys):,} files, {size:,} bytes, "
            f"keys={keys!r}, remote={self.remote}, cache={self.cache!r}"
            + (f", {self.skipped()}" if self.hidden or self.special or self.other else "")
            + ")"
        )

    def skipped(self) -> str:
        """What the listing left out, in words (``""``: nothing)."""
        parts = []
        if self.hidden:
            parts.append(
                f"skipped {self.hidden:,} hidden file(s) or folder(s) (a name starting with "
                f"'.', e.g. {self.hidden_example!r}: macOS's ._ files, editor and notebook "
                "copies); pass a list of paths to read such files"
            )
        if self.special:
            parts.append(special_skipped(self.special, self.special_example))
        if self.other:
            parts.append(self.other_said)
        return "; ".join(parts)

    def name(self, i: int) -> str:
        """How errors name file ``i``: its URL or path."""
        key = self.keys[i]
        return f"{self.url}/{key}" if self.url else key

    def fetch(self, i: int) -> Any:
        """The whole of file ``i`` as a bytes-like buffer, checked against the listed size."""
        data = self._fetch(i)
        got, want = memoryview(data).nbytes, self.sizes[i]
        if got != want:
            # A local file's size when read: it changed. (An object's GET of the ETag
            # listed came short three times: the store or a proxy cut it.)
            fix = (
                "" if self.remote else "; a run reads the versions it listed: open the source again"
            )
            raise StorageError(
                f"{self.name(i)}: truncated or changed object: got {got} bytes, the listing "
                f"said {want}; refusing to decode it{fix}"
            )
        return data

    def fetch_ranges(
        self,
        i: int,
        queue: RequestQueue,
        *,
        cache_ranges: bool = True,
        whole_up_to: int | None = None,
        cache_block: int = 0,
    ) -> Callable[[list[tuple[int, int]], NDArray[np.uint8]], None]:
        """``fetch(spans, buf)`` of object ``i``: fills ``buf[a:b]`` with its bytes
        ``[a, b)`` for each span, from the cache's whole entry of it when there is one
        (and the object has at most ``whole_up_to`` bytes: checking an entry reads all
        of it), else by ranged GETs on ``queue`` (all in flight at once), each checked
        against the listed size and ETag (``cache_ranges``: through the cache's range
        entries). An entry that proves bad is removed, and the store serves the file
        from then on.

        ``cache_block``: with a cache, range entries are the ``cache_block``-aligned
        blocks the spans touch (those not held fetched by one GET a run of touching
        blocks), not the spans: spans join the rows one read asks, which differ every
        epoch and read-ahead chunk, so entries named by them were rarely found again."""
        from headrace.formats._object_files import RemoteFile
        from headrace.io import ObjectInfo

        size, etag = self.sizes[i], self.etags[i]
        cache = None
        if self.cache is not None and self.cache_key is not None:
            cache = (self.cache, self.cache_key(i))
        # (A weak or missing ETag is not cached: RemoteFile counts it, once a read.)
        strong = etag is not None and not etag.startswith("W/")
        blocked = cache_block > 0 and cache_ranges and cache is not None and strong
        remote = RemoteFile(
            self.store,
            self.keys[i],
            self.name(i),
            ObjectInfo(size, etag),
            queue,
            cache if cache_ranges and not blocked else None,
        )
        whole = None  # one stat: no entry, no checksum pass
        small = whole_up_to is None or size <= whole_up_to
        if cache is not None and etag is not None and small:
            if os.path.exists(cache[0].path(cache[1], size, etag)):
                whole = cache

        def fetch(spans: list[tuple[int, int]], buf: NDArray[np.uint8]) -> None:
            nonlocal whole
            if whole is not None:
                assert etag is not None
                if whole[0].read_ranges(whole[1], size, etag, spans, buf):
                    return
                whole = None  # not a good entry (removed): the store's bytes from now on
            if blocked:
                futures, keep = self.start_blocks(i, queue, spans, buf, cache_block)
                wait_all(futures)
                keep()
                return
            wait_all([p for a, b in spans for p in remote.read_pieces(buf[a:b], a)])

        return fetch

    def start_blocks(
        self,
        i: int,
        queue: RequestQueue,
        spans: list[tuple[int, int]],
        buf: NDArray[np.uint8],
        block: int,
    ) -> tuple[list[Future[None]], Callable[[], None]]:
        """Start filling ``buf[a:b]`` with object ``i``'s bytes ``[a, b)`` for each span,
        through the cache (it must have one) as ``block``-aligned blocks (what
        :meth:`fetch_ranges` with ``cache_block`` does, waiting at once), in two steps,
        so that a read of many objects waits for all their GETs at once without a
        thread an object: the blocks the cache holds
        are read now, in this thread (local files: threads contending for the GIL over
        their stats, opens and small reads made a warm epoch 3x slower than local
        files), and the GETs of the rest started on ``queue``. Returns their futures,
        and ``keep()``, to call once they are done: it keeps the blocks fetched."""
        from headrace.formats._object_files import RemoteFile
        from headrace.io import ObjectInfo

        assert self.cache is not None and self.cache_key is not None
        size, etag = self.sizes[i], self.etags[i]
        remote = RemoteFile(self.store, self.keys[i], self.name(i), ObjectInfo(size, etag), queue)
        if not self.cache.cacheable(etag):  # counted, not cached: the store's bytes
            return [p for a, b in spans for p in remote.read_pieces(buf[a:b], a)], lambda: None
        cache = (self.cache, self.cache_key(i))
        if _from_whole(cache, size, etag, spans, buf):  # its blocks joined
            return [], lambda: None
        fetch, keep = _blocks(cache, size, etag, block, spans, buf)
        futures = [p for a, b in fetch for p in remote.read_pieces(buf[a:b], a)]
        return futures, lambda: cache[0].write_blocks(cache[1], size, etag, block, keep, buf)

    def local_ranges(
        self, i: int, reader: RangeReader | None = None
    ) -> Callable[[list[tuple[int, int]], NDArray[np.uint8]], None]:
        """``fetch(spans, buf)`` of local file ``i``: fills ``buf[a:b]`` with its bytes
        ``[a, b)`` for each span, then checks the file is the version listed (its size,
        device, inode and mtime), as :meth:`fetch` does for a whole file.

        The spans come coalesced (:class:`~headrace.formats._sparse.SparseImage` joins
        neighbours within 64 KiB, the engine's own gap) and each fetch runs on a thread of
        the source's window, ``in_flight`` at once: a ``pread`` each, in this thread.
        ``reader`` (O_DIRECT's aligned reads) reads them instead. The engine's pread
        cost ~50 us a call of 2 ranges on top (~19 us to open a file and read both),
        more than a whole pread of a 1 MiB file gained. On a network or FUSE mount,
        where each ``pread`` is a round trip, the spans are read all at once on the deep
        I/O pool (every one finished before the first error is raised): one after
        another, 40 steps of 64 rows from 16 MB NPY files took 1.35x the time of whole
        files at 2 ms a read."""
        path = self.name(i)

        def check(fd: int) -> None:
            self.check_listed(i, fd)

        def fetch(spans: list[tuple[int, int]], buf: NDArray[np.uint8]) -> None:
            if reader is not None:
                ranges = [(a, b - a) for a, b in spans]
                try:
                    reader.read_into(path, ranges, [buf[a:b] for a, b in spans])
                except ObjectNotFoundError as exc:  # its open: not a typo ("did you mean")
                    raise _gone(path) from exc
                except ReadEOFError as exc:
                    self.shrank(i, reader.file(path).fd, exc)
                    raise
                check(reader.file(path).fd)
                return
            with _listed(path) as f:
                try:
                    if len(spans) > 1 and f.network:
                        pool = deep_io_pool()
                        wait_all([pool.submit(f.pread_into, buf[a:b], a) for a, b in spans])
                    else:
                        for a, b in spans:
                            f.pread_into(buf[a:b], a)
                except ReadEOFError as exc:
                    self.shrank(i, f.fd, exc)
                    raise
                check(f.fd)

        return fetch

    def shrank(self, i: int, fd: int, exc: ReadEOFError) -> None:
        """Say a read of local file ``i`` (``fd``) that met end of file before the size
        listed (``exc``) as the file changed since it was listed, where it did (see
        :meth:`check_listed`), as a whole file's read says it: not a bare end of file.
        Returns where it is the version listed: the caller raises ``exc`` then."""
        try:
            self.check_listed(i, fd)
        except StorageError as changed:
            raise changed from exc

    def open_local(self, i: int) -> LocalFile:
        """Local file ``i`` opened: one gone since it was listed is said as such."""
        return _listed(self.name(i))

    def local_map(self, i: int) -> LocalFile | None:
        """Local file ``i`` opened and mapped, checked to be the version listed (see
        :meth:`check_listed`); ``None`` where a map would not serve: on a network or
        FUSE mount (a page the storage fails to read is SIGBUS there, and each page
        a round trip), a filesystem that cannot map, an empty file."""
        f = self.open_local(i)
        try:
            if f.size == 0 or f.network or not f.mappable:
                f.close()
                return None
            self.check_listed(i, f.fd)
        except BaseException:
            f.close()
            raise
        return f

    def cached_map(self, i: int, spans: Spans) -> LocalFile | None:
        """Object ``i``'s whole entry in the cache, open and its bytes ``spans``
        checked, to map; ``None`` where there is none, or it cannot be mapped (see
        :meth:`ObjectCache.open_whole`)."""
        at = self._cached(i)
        return None if at is None else at[0].open_whole(at[1], self.sizes[i], at[2], spans)

    def cached_entry(self, i: int) -> str | None:
        """Where object ``i``'s whole entry in the cache is (if any), or ``None``."""
        at = self._cached(i)
        return None if at is None else at[0].path(at[1], self.sizes[i], at[2])

    def cached_checked(self, i: int, f: LocalFile, spans: Spans) -> bool:
        """Whether object ``i``'s whole entry, kept open as ``f`` since a
        :meth:`cached_map`, holds what was written where ``spans`` lie."""
        at = self._cached(i)
        return at is not None and at[0].whole_checked(at[1], self.sizes[i], at[2], f, spans)

    def _cached(self, i: int) -> tuple[ObjectCache, str, str] | None:
        """The cache, object ``i``'s key in it and its ETag, where it may be cached."""
        etag = self.etags[i]
        if self.cache is None or self.cache_key is None or etag is None or etag.startswith("W/"):
            return None
        return self.cache, self.cache_key(i), etag

    def check_entry(self, i: int, fd: int) -> None:
        """Refuse to read the map of object ``i``'s cache entry (``fd``) unless it still
        holds the object's bytes and its checksum: an entry cut short under a map is
        ``SIGBUS`` at the read (no writer of the cache does so; something else might)."""
        now, want = os.fstat(fd).st_size, self.sizes[i] + ObjectCache.TRAILER_BYTES
        if now != want:
            raise StorageError(
                errno.ESTALE,
                f"{self.name(i)}: its cache entry was cut to {now} bytes under a read (it "
                f"held {want}); remove the cache directory's damaged entries "
                "(headrace cache DIR --clear) and run again",
            )

    def check_listed(self, i: int, fd: int) -> None:
        """Refuse bytes just read from ``fd``, local file ``i``'s descriptor, unless the
        file is the version listed: its size, device, inode and mtime (see
        :func:`_check_version`)."""
        self._refuse_changed(i, os.fstat(fd))

    def check_unread(self, i: int) -> None:
        """Refuse to go on with what was read of local file ``i`` before (its NPZ
        members kept inflated, :class:`~._npz.Inflated`; the bytes or map a read kept
        for the next, :meth:`FileDecoder.fetch_and_decode`) unless the file is still the
        version listed, by a stat of its path (as :meth:`check_listed` after a read):
        it was read whole again for each read of its rows to check that (4 files of
        64 samples of 256 KiB, map-style: 64 times their 28 MB an epoch)."""
        path = self.name(i)
        try:
            st = os.stat(path)
        except OSError as exc:
            err = open_error(path, exc)
            raise (_gone(path) if isinstance(err, ObjectNotFoundError) else err) from exc
        self._refuse_changed(i, st)

    def _refuse_changed(self, i: int, st: os.stat_result) -> None:
        path, size = self.name(i), self.sizes[i]
        if st.st_size != size:
            raise StorageError(
                errno.ESTALE,
                f"{path}: truncated or changed file: {st.st_size} bytes now, the listing "
                f"said {size}; a run reads the versions it listed: open the source again",
            )
        _check_stat(path, st, self.etags[i], size)

    def close(self) -> None:
        self._close()


def _blocks(
    cache: tuple[ObjectCache, str],
    size: int,
    etag: str,
    block: int,
    spans: list[tuple[int, int]],
    buf: NDArray[np.uint8],
) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """The ``block``-aligned blocks ``spans`` touch, the spans' bytes of those the cache
    holds read into ``buf`` (a block's entry checked whole once a process, then only
    the spans read: a block holds ~20 samples of 3 KB, which a shuffle spreads over many
    reads): ``(fetch, keep)``, the spans to fetch and the runs of blocks to keep once
    fetched. The blocks it lacks, touching ones joined, are fetched and kept; where the
    cache can no longer write (full: it never evicts), only the spans' own bytes of them
    are fetched, as without blocks, and nothing is kept (a whole block for each row
    would cost 16 times a 4 KiB row's bytes on every read, for nothing). The blocks
    read are counted, for the cache to join them into the whole entry once all are
    there (:meth:`ObjectCache.blocks_read`); a read that finds a block gone meanwhile
    reads the whole entry."""
    found, name = cache
    within: dict[int, list[tuple[int, int]]] = {}  # each touched block's bits of the spans
    for a, b in spans:
        for k in range(a // block, (b - 1) // block + 1) if b > a else ():
            within.setdefault(k, []).append((max(a, k * block), min(b, (k + 1) * block)))
    missing = []
    for k in sorted(within):
        a, b = k * block, min((k + 1) * block, size)
        if not found.read_ranges(name, size, etag, within[k], buf, a, b - a):
            missing.append((a, b))
    if missing and _from_whole(cache, size, etag, spans, buf):  # joined meanwhile
        return [], []
    found.blocks_read(name, size, etag, block, len(within))
    runs = merge_ranges(missing)
    if found.writing:
        return runs, runs
    bits = [(max(a, x), min(b, y)) for x, y in runs for a, b in spans if a < y and b > x]
    return merge_ranges(bits, gap=block), []  # a GET for spans a block apart, as uncached


def _from_whole(
    cache: tuple[ObjectCache, str],
    size: int,
    etag: str,
    spans: list[tuple[int, int]],
    buf: NDArray[np.uint8],
) -> bool:
    """Whether the spans were read into ``buf`` from the object's whole entry (one
    ``stat`` where there is none, not counted as a miss)."""
    found, name = cache
    if not os.path.exists(found.path(name, size, etag)):
        return False
    return found.read_ranges(name, size, etag, spans, buf)


def special_skipped(n: int, example: str | None) -> str:
    """What a listing says of the files it left out as not regular files."""
    return (
        f"skipped {n:,} file(s) that are not regular files (e.g. {example}): a sample must "
        "be a regular file (reading a FIFO waits for a writer for ever); write their data "
        "to files to read them"
    )


def _check_version(path: str, fd: int, listed: str | None, size: int) -> None:
    """Refuse bytes just read from ``fd`` unless the file is the version listed.

    Stat after the read: a rewrite in place that began before or during it has
    moved the mtime by now, and a rename over the path leaves ``fd`` on the old
    inode, which the tag names. Only the size was compared before, so a file
    replaced by one of the same size was read as the new version, mixing two
    versions of one file in an epoch (``shuffle="samples"`` reads a file once per
    sample) where an object's new ETag was refused.
    """
    _check_stat(path, os.fstat(fd), listed, size)


def _check_stat(path: str, st: os.stat_result, listed: str | None, size: int) -> None:
    """Refuse file ``path`` unless ``st``, its stat, is the version listed."""
    now = local_version(st)
    # Another size: FileList.fetch refuses it, naming both sizes.
    if listed is not None and now != listed and st.st_size == size:
        raise StorageError(
            errno.ESTALE,
            f"{path}: the file changed since it was listed (device:inode:mtime_ns "
            f"{listed}; now {now}, {st.st_size} bytes): replaced or written to; a run reads "
            "the versions it listed: open the source again to read the new one",
        )


def _local_reader(
    read: LocalRead, root: str, keys: PackedNames, sizes: PackedSizes, versions: PackedTags
) -> Callable[[int], Any]:
    # Each path joined when fetched, not held: a list of them was a second string a file
    # beside its key (about 100 bytes a file; 128 MB for 1,281,167 ImageNet files).
    def path_of(i: int) -> str:
        return os.path.join(root, keys[i]) if root else keys[i]

    if read == "odirect":
        # One aligned O_DIRECT read per file, in the calling thread: the depth comes
        # from how many fetches run at once (1 for map-style, ``in_flight`` else).
        # A reader per fetch: a shared one would keep every file of the dataset open.
        config = ReaderConfig(strategy="odirect-serial")

        def fetch_direct(i: int) -> NDArray[np.uint8]:
            path = path_of(i)
            with RangeReader(config) as reader:
                try:
                    size = reader.size(path)
                except ObjectNotFoundError as exc:
                    raise _gone(path) from exc
                out = np.empty(size, dtype=np.uint8)
                reader.read_into(path, [(0, size)], [out])
                _check_version(path, reader.file(path).fd, versions[i], sizes[i])
            return out

        return fetch_direct

    def fetch_pread(i: int) -> NDArray[np.uint8]:
        path = path_of(i)
        with _listed(path) as f:
            size = os.fstat(f.fd).st_size
            out = np.empty(size, dtype=np.uint8)
            f.pread_into(out, 0)
            _check_version(path, f.fd, versions[i], sizes[i])
        return out

    return fetch_pread


def _gone(path: str) -> ObjectNotFoundError:
    return gone_error(path, "file source", "listed")


def _listed(path: str) -> LocalFile:
    """Open a file the listing found: one gone since is said as such, not as a typo
    ("did you mean '005.npy'?" for a file deleted during the run)."""
    try:
        return LocalFile(path)
    except ObjectNotFoundError as exc:
        raise _gone(path) from exc


def refuse_repeats(paths: Sequence[str], what: str) -> None:
    """Refuse a list of files (or object URLs) that names one twice, naming both
    spellings: a local path by its absolute, normalised form (``d/./a.npy`` is
    ``d/a.npy``), a ``file://`` URL by its normalised path alike, another URL as
    written. Each listed file is read once an epoch, so a
    repeat would read its ``what`` twice as often, silently (a file reached by two
    symbolic links is two names, as a copy would be: kept)."""
    seen: dict[str, str] = {}
    for p in paths:
        if p.startswith("file://"):
            same = "file://" + posixpath.normpath(p[len("file://") :])
        else:
            same = p if is_object_url(p) else os.path.normpath(os.path.abspath(p))
        if same in seen:
            raise ConfigError(
                f"{p}: listed twice (as {seen[same]} and {p}); each listed file is read "
                f"once an epoch, so a second listing would read its {what} twice as often, "
                "silently. Remove the repeat (a list joined from overlapping globs?); to "
                "weight a file up, give it its own source in a Mixture"
            )
        seen[same] = p


def _no_match(given: str, by_case: Sequence[str] = ()) -> ObjectNotFoundError:
    return ObjectNotFoundError(
        f"{given}: no files match this glob pattern (nor is it a folder)"
        + case_missed_hint(given, by_case)
        + ESCAPE_HINT
    )


def case_missed_hint(pattern: str, by_case: Sequence[str]) -> str:
    """Said where a glob that matches nothing misses files only by its extension's case
    (a folder of ``.JPG`` photos globbed as ``*.jpg``)."""
    if not by_case:
        return ""
    ext = pattern.rpartition(".")[2]
    either = _either(ext)
    return (
        f"; {len(by_case):,} file(s) match it but for the case of their extension (e.g. "
        f"{by_case[0]!r}): write the extension as .{either} to read them"
    )


class _Matched:
    """The paths a list's glob patterns matched (folders among them are no samples), as
    "not one of the paths given as they are": a pattern may match a million files, and a
    set of them cost ~100 MB while listed; the paths given as they are are few."""

    def __init__(self, given: set[str], patterns: list[str]) -> None:
        self.given = given
        self.patterns = patterns
        #: files the patterns miss only by their extension's case, and what to say of them
        self.missed = 0
        self.missed_said = ""

    def __contains__(self, path: object) -> bool:
        return bool(self.patterns) and path not in self.given


def _either(ext: str) -> str:
    """``ext`` as a glob of either case: ``jpg`` -> ``[jJ][pP][gG]``."""
    return "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else c for c in ext)


def either_case(pattern: str, sep: str = os.sep) -> str | None:
    """``pattern`` with the extension its last part ends in matched in either case
    (``*.jpg``: ``*.[jJ][pP][gG]``); ``None`` where it ends in no extension of letters."""
    head, at, last = pattern.rpartition(sep)
    stem, dot, ext = last.rpartition(".")
    if not dot or not ext.isalnum() or ext.lower() == ext.upper():  # no letters to case
        return None
    return f"{head}{at}{stem}.{_either(ext)}"


def case_missed_said(count: int, pattern: str, example: str) -> str:
    """What a listing says of the ``count`` files that the glob ``pattern`` (local or an
    object store's) misses only by the case of its extension."""
    ext = pattern.rpartition(".")[2]
    either = _either(ext)
    return (
        f"left out {count:,} file(s) that the glob pattern {pattern} misses only "
        f"by the case of its extension (e.g. {example!r}): a glob matches case by case, "
        f"where a folder's listing (and torchvision's ImageFolder) reads .{ext.upper()} "
        f"as .{ext.lower()}; to read them too, write the extension as .{either}, or give "
        "the folder"
    )


def _case_glob(pattern: str) -> tuple[list[str], list[str]]:
    """``glob.glob(pattern, recursive=True)``, and the names it misses only by the case of
    an extension its last part ends in (``*.jpg``: ``x.JPG``), from one walk: a glob of
    the extension in either case (``*.[jJ][pP][gG]``), its matches that end as written
    being the pattern's own (the part before the extension is the same pattern)."""
    either = either_case(pattern)
    if either is None:
        return glob.glob(pattern, recursive=True), []
    ext = pattern.rpartition(".")[2]
    found: list[str] = []
    missed: list[str] = []
    for p in glob.glob(either, recursive=True):
        (found if p.endswith(f".{ext}") else missed).append(p)
    return found, missed


def _expand(files: Iterable[str | os.PathLike[str]]) -> tuple[list[str], _Matched]:
    """``files`` (paths, and glob patterns, as Hugging Face's ``data_files`` take them)
    as paths, each pattern's matches in its place, and which are a pattern's (folders
    matched are no samples). A pattern that matches nothing is refused by name (as a
    missing path is); until 2026-12-05 a list's pattern was taken for a path, and the
    error asked "did you mean" one of its matches."""
    out: list[str] = []
    given: set[str] = set()
    patterns: list[str] = []
    missed: list[tuple[str, str]] = []  # (pattern, a file it missed by case)
    for p in files:
        text = os.fspath(p)
        pattern = local_pattern(text)
        if pattern is None:
            out.append(text)
            given.add(text)
            continue
        with in_flight.Waiting("list", pattern):
            found, by_case = _case_glob(pattern)
        if not found:
            raise _no_match(text, sorted(by_case))
        if "**" in pattern:
            refuse_glob_cycles(text, found)
        out += found
        patterns.append(text)
        missed += [(text, m) for m in sorted(by_case)]
    matched = _Matched(given, patterns)
    if missed:
        # A folder's listing (and ImageFolder) take .JPG as .jpg; a glob does not: a class
        # of .JPG files alone went unnumbered, and the classes after it shifted, unsaid.
        pattern, example = missed[0]
        matched.missed = len(missed)
        matched.missed_said = case_missed_said(len(missed), pattern, example)
    return out, matched


#: keys, sizes, ETags: a worker copy's are a FileList's (packed), a listing's lists
Listing = tuple[Sequence[str], Sequence[int], Sequence[str | None]]


def _prefix_folders(every: list[tuple[str, int, str | None]], markers: set[str]) -> tuple[str, ...]:
    """The "folders" directly under a prefix, less hidden ones, as a local folder's walk
    finds them (:attr:`FileList.folders`): those any object is under (of another format
    too), and the empty ones a console's marker ``x/`` shows (listed as ``x``, told from
    an empty object ``x`` by a HEAD: ``markers``)."""
    heads = {k.partition("/")[0] for k, _, _ in every if "/" in k}
    heads.update(m for m in markers if "/" not in m)
    return tuple(sorted(h for h in heads if h and not is_hidden(h)))


def packed(listing: Listing) -> tuple[PackedNames, PackedSizes, PackedTags]:
    """``listing`` packed (as it is where it is already)."""
    keys, sizes, etags = listing
    if not len(keys) == len(sizes) == len(etags):
        raise ValueError(f"a listing of {len(keys)} keys, {len(sizes)} sizes, {len(etags)} ETags")
    return PackedNames.of(keys), PackedSizes.of(sizes), PackedTags.of(etags)


def columns(rows: Sequence[tuple[str, int, str | None]]) -> Listing:
    """``(key, size, ETag)`` rows as a listing's three columns."""
    return [k for k, _, _ in rows], [s for _, s, _ in rows], [e for _, _, e in rows]


def _other_said(count: int, example: str, extensions: tuple[str, ...]) -> str:
    """What a listing says of the ``count`` files of another format it left out."""
    fmt = format_of(example)  # None: a gzipped tar, left out by a listing of tar shards
    return other_skipped(count, example, extensions, fmt.name if fmt is not None else None)


def list_files(
    files: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    extensions: tuple[str, ...] = (),
    local_read: LocalRead = "pread",
    store_options: Mapping[str, Any] | None = None,
    listing: Listing | None = None,
    cache: ObjectCache | None = None,
    listed_at: str | None = None,
) -> FileList:
    """List a dataset once: a directory or URL prefix (files ending in ``extensions``),
    or a list of paths or of object URLs.

    ``listing`` (keys, sizes, ETags) skips the listing: a worker copy of a source
    re-opens the same files without asking the store again, so it cannot see
    a different set of files than its parent planned over; ``listed_at``, the URL its
    object keys are under (the parent's ``FileList.url``): the prefix or glob is not
    resolved again (``s3://b/d[1]/``, a prefix named with a wildcard character, is no
    glob to its parent, which found it). ``cache``: objects
    are read through it (see :class:`headrace.io.ObjectCache`); object stores only.
    """
    if local_read not in ("pread", "odirect"):
        raise ConfigError(f"local_read must be 'pread' or 'odirect' (got {local_read!r}).")
    if not isinstance(files, (str, os.PathLike, PackedNames)):
        # Once: a generator (root.glob("*.jpg")) read for URLs first was empty after.
        # (A worker copy's packed paths are read again as they are: no str a path held.)
        files = list(files)
    refuse_empty([files] if isinstance(files, (str, os.PathLike)) else files, "FileSource")
    if listing is None:
        refuse_webdataset_urls(
            [files] if isinstance(files, (str, os.PathLike)) else files, "FileSource"
        )
    if isinstance(files, (str, os.PathLike)) and is_object_url(str(files)):
        from headrace.formats._file_list_objects import object_glob, remote_list, why_empty
        from headrace.io import ObjectStore

        options = check_store_options(store_options, remote=True)
        if listing is not None and listed_at is not None:
            at = ObjectStore(listed_at, **options)
            try:
                return remote_list(at, listing, options, cache)
            except BaseException:
                at.close()
                raise
        globbed = object_glob(str(files), options, listing, cache)
        if globbed is not None:
            return globbed
        store = ObjectStore(str(files), **options)
        try:
            hidden, example, every, markers = 0, None, [], set()
            if listing is not None:
                listed = listing
            else:
                every = [(k, i.size, i.etag) for k, i in store.list_info()]
                # The folder markers among the empty objects (a HEAD each, once: they are
                # no files, and an empty folder's marker is a class folder too).
                markers = set(store.folder_markers([k for k, size, _ in every if not size]))
                infos = [x for x in every if keep(x[0], extensions) and x[0] not in markers]
                rows, hidden, example = drop_hidden(infos, lambda x: x[0])
                listed = columns(rows)
        except BaseException:
            store.close()
            raise
        if not len(listed[0]):
            store.close()
            others = suffixes(k for k, _, _ in every if not is_hidden(k))
            nothing = not every and listing is None  # a misspelt prefix, or one object
            said = (
                "nothing is stored under it"
                if nothing
                else none_found("objects", extensions, others, hidden, example)
            )
            raise DataError(
                f"{store.url}: {said}" + why_empty(str(files), options, nothing=nothing)
            )
        out = remote_list(store, listed, options, cache)
        out.hidden, out.hidden_example = hidden, example
        out.rooted = True
        if listing is None:
            out.folders = _prefix_folders(every, markers)
        unread = other_formats(extensions, EXTENSIONS)  # () where every file is read
        other = sorted(k for k, _, _ in every if k.lower().endswith(unread) and not is_hidden(k))
        if other:
            out.other, out.other_said = len(other), _other_said(len(other), other[0], extensions)
        return out
    if not isinstance(files, (str, os.PathLike)) and any(is_object_url(str(p)) for p in files):
        from headrace.formats._file_list_objects import url_list

        return url_list([str(p) for p in files], store_options, listing, cache, listed_at)
    check_store_options(
        store_options,
        remote=False,
        paths=[files] if isinstance(files, (str, os.PathLike)) else files,
    )
    if cache is not None:
        local = [files] if isinstance(files, (str, os.PathLike)) else list(files)
        raise local_cache_refused(repr(files), local)
    if isinstance(files, (str, os.PathLike)) and local_pattern(os.fspath(files)) is not None:
        files = [files]  # a glob pattern: the files it matches, as a list of them would be
    paths: list[str] = []
    matched = _Matched(set(), [])
    if not isinstance(files, (str, os.PathLike)) and listing is None:
        # A worker's copy reads the files its parent listed (its patterns matched then).
        paths, matched = _expand(files)
    if isinstance(files, (str, os.PathLike)):
        root = Path(files)
        try:
            folder = stat.S_ISDIR(os.stat(root).st_mode)
        except FileNotFoundError:  # (Path("S3://b/x") is S3:/b/x: the name as given)
            raise ObjectNotFoundError(
                f"{os.fspath(files)}: no such directory (FileSource takes a directory, a glob "
                f"pattern, an object-store URL or a list of files){missing_hint(str(files))}"
            ) from None
        except OSError as exc:  # a mount gone (ENOTCONN), a folder not searchable
            raise open_error(os.fspath(files), exc) from exc
        if not folder:
            # One HDF5 or NPY file of every sample is a common layout: say how to read it.
            raise ConfigError(
                f"{root}: is a file, not a directory; FileSource takes a directory, a glob "
                f"pattern, an object-store URL or a list of files: pass [{str(root)!r}] "
                "(a list) to read this file alone, or the folder it is in"
            )
        url = str(root)
        unread = other_formats(extensions, EXTENSIONS)
        walked = walk(root, extensions, unread) if listing is None else None
        keys = walked.keys if walked is not None else listing[0] if listing else []
        if not keys:
            hidden, example = (walked.hidden, walked.hidden_example) if walked else (0, None)
            others = folder_suffixes(root)
            special = ""
            if walked and walked.special:
                special = special_skipped(walked.special, walked.special_example)
            found = none_found("files", extensions, others, hidden, example, special)
            raise DataError(f"{root}: {found}")
    else:
        keys = listing[0] if listing is not None else sorted(paths)
        if not keys:
            raise ConfigError("the list of files is empty.")
        if listing is None:
            refuse_repeats(keys, "samples")
        url, walked = "", None
    if listing is not None:
        # A worker's copy reads the sizes and versions its parent listed.
        listed = packed(listing)
    elif walked is not None:
        listed = walked.keys, walked.sizes, walked.versions  # the walk's stat: one a file
    else:
        files_of: list[str] = []
        sizes, versions = [], []
        for k, st in regular_stats(keys, matched, url):
            files_of.append(k)
            sizes.append(st.st_size)
            versions.append(local_version(st))
        if not files_of:  # patterns that match folders only
            raise _no_match(", ".join(matched.patterns))
        listed = packed((files_of, sizes, versions))
    return FileList(
        url=url,
        keys=listed[0],
        sizes=listed[1],
        remote=False,
        _fetch=_local_reader(local_read, url, *listed),
        _close=lambda: None,
        etags=listed[2],
        rooted=bool(url),
        folders=walked.folders if walked else (),
        hidden=walked.hidden if walked else 0,
        hidden_example=walked.hidden_example if walked else None,
        special=walked.special if walked else 0,
        special_example=walked.special_example if walked else None,
        other=walked.other if walked else matched.missed,
        other_said=(
            _other_said(walked.other, walked.other_example, extensions)
            if walked and walked.other_example
            else matched.missed_said
        ),
    )
