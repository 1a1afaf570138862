"""Per-file sample counts read from the files' headers, not their data.

``FileSource(..., samples_per_file="header")`` needs each file's count before
it can plan: the length of the leading axis of its array. That is in the
first bytes of an NPY file, in the central directory (at the end) and the
member's own header of an NPZ, and in the object headers of an HDF5 file
(near its start when h5py wrote it). Each file is read through a
:class:`~headrace.formats._sparse.SparseImage`: only the byte ranges a parser
asks for, fetched on demand in blocks of at least ``BLOCK`` bytes (a ranged GET
each on object storage, a ``pread`` locally), with a first read where the header
usually is. A tar or TFRecord walk on object storage fetches growing spans instead
(:data:`~headrace.formats._sparse.WALK_CAP`): 8 shards of 200 members of 100 kB
behind 20 ms took 80 GETs and 0.6 s, not 1,608 and 5.2 s.
A file the object cache (``cache_dir``) holds whole is read from that entry, not by
GETs (:meth:`~headrace.formats._file_list.FileList.fetch_ranges`).
Files are counted ``depth`` at a time (the source's ``in_flight``), so on
object storage that many ranged GETs are in flight.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from headrace._messages import some_of
from headrace.errors import (
    ConfigError,
    DataError,
    HeadraceError,
    ReadEOFError,
    UnsupportedFormError,
)
from headrace.formats._array_record import BLOCK_SIZE, read_index
from headrace.formats._file_list import FileList, is_object_url
from headrace.formats._file_list_objects import is_url_pattern
from headrace.formats._files import FileFormat
from headrace.formats._hdf5 import hdf5_rows
from headrace.formats._npy import NPY_HEAD, npy_header, npy_rows
from headrace.formats._npy_ranges import HEAD_BYTES
from headrace.formats._npz import npz_rows
from headrace.formats._object_files import named_url
from headrace.formats._sparse import BLOCK, Span, SparseImage
from headrace.formats._tar import (
    BrokenSample,
    TarIndex,
    broken_alike,
    broken_fields,
    check_alike,
    check_fields,
    tar_index,
)
from headrace.formats._tar_ranges import TarIndexes
from headrace.formats._tfrecord import walk_records
from headrace.formats._url_glob import local_pattern
from headrace.io import ObjectCache, RequestQueue
from headrace.io._daemon_pool import one_call_pool
from headrace.io._waits import result

SamplesPerFile = int | tuple[int, ...] | str

__all__ = [
    "CountStats",
    "check_samples_per_file",
    "header_counts",
    "resolve_counts",
    "short_counts",
]

# The first read of each format, where its header usually is: an NPY header is 128
# bytes as NumPy writes most (a longer one is read on); an NPZ's directory is at the
# end; h5py writes the superblock and object headers first (16 KiB: one read for
# contiguous datasets, two for chunked ones, measured on files of 1 MB); an ArrayRecord
# file's postscript starts its last 64 KiB block (then its footer, just before).
_FIRST: dict[str, tuple[int, int | None]] = {  # format -> (bytes, from this far from the end)
    "npy": (NPY_HEAD, None),
    "npz": (BLOCK, BLOCK),
    "hdf5": (4 * BLOCK, None),
    "tar": (BLOCK, None),  # then each member's header, a block each where members are large
    "tfrecord": (BLOCK, None),
    "array_record": (BLOCK, BLOCK_SIZE),
}


@dataclass(slots=True)
class CountStats:
    """What counting the headers cost: files, reads (ranged GETs or preads), bytes
    fetched (a tar or TFRecord walk on object storage: its spans, most of a shard of
    small members), time."""

    files: int = 0
    reads: int = 0
    bytes: int = 0
    seconds: float = 0.0
    depth: int = 0
    #: the counts came from the object cache (``cache_dir``): no header was read
    from_cache: bool = False


Fetch = Callable[[list[Span], NDArray[np.uint8]], None]


def _local(files: FileList, i: int) -> tuple[Fetch, Callable[[], None]]:
    # Opened once (a tar or TFRecord walk is a read a member's or record's header); one
    # deleted or cut short since it was listed is said as such, not as a typo ("did you
    # mean") or a bare end of file.
    f = files.open_local(i)

    def fetch(spans: list[Span], buf: NDArray[np.uint8]) -> None:
        try:
            for a, b in spans:
                f.pread_into(buf[a:b], a)
        except ReadEOFError as exc:
            files.shrank(i, f.fd, exc)
            raise

    return fetch, f.close


#: The largest cached file whose header is read from its cache entry. Checking an entry
#: reads all of it once a process (its checksum covers every byte; ~0.5 ms a MiB for
#: the CRC alone here), where a header is one or two ranged GETs, many in flight at
#: once: a restart of 168 cached 140 MB NPZ files would read 23 GB before planning.
HEADERS_FROM_CACHE_UP_TO = 1 << 20


def _nothing() -> None:
    pass


def _count_one(
    fmt: FileFormat,
    datasets: Sequence[str] | None,
    files: FileList,
    i: int,
    queue: RequestQueue | None,
    check: bool = True,
) -> tuple[int, int, int, bytes | TarIndex | None]:
    """File ``i``'s count, the reads and bytes it took, and (NPY) its header's bytes,
    (tar) its index or (TFRecord, ArrayRecord) its record or chunk index (TFRecord: each
    record's data offset, then length, as int64). A tar shard where a sample lacks a
    field asked (without ``datasets=``: holds other fields than most) is refused here
    where ``check`` (else, under ``on_corrupt="replace"``, counted whole:
    :func:`header_counts` notes it, and those samples are replaced)."""
    name, size = files.name(i), files.sizes[i]
    if queue is None:
        fetch, close = _local(files, i)
    else:
        # From the cache's whole entry when it holds one (a restart with a warm cache:
        # no GET), if small; the header's ranges are not kept as entries of their own.
        up_to = HEADERS_FROM_CACHE_UP_TO
        fetch = files.fetch_ranges(i, queue, cache_ranges=False, whole_up_to=up_to)
        close = _nothing
    try:
        f = SparseImage(size, fetch, name)
        # A chain of headers on object storage: a round trip a miss, so fewer, larger.
        f.walking = queue is not None and fmt.name in ("tar", "tfrecord")
        first, back = _FIRST[fmt.name]
        start = 0 if back is None else max(0, size - back)
        f.fill([(start, start + first)], gap=0)
        head: bytes | TarIndex | None = None
        if fmt.name == "npy":
            n = npy_rows(f.at, name=name, size=size)
            head = bytes(f.at(0, npy_header(f.at, name)[3]))  # held: no read
        elif fmt.name == "npz":
            n = npz_rows(f, name=name, key=datasets[0] if datasets else None)
        elif fmt.name == "tar":
            index = tar_index(f.at, size, name, cut=not check)
            if datasets and check:  # a sample lacking a field asked: refused now, not hours in
                check_fields(index, datasets, name)
            elif check:  # (and one of other fields than most, without datasets=)
                check_alike(index, name)
            n, head = len(index), index  # kept: the reads need not walk it again
        elif fmt.name in ("tfrecord", "array_record"):
            walk = walk_records if fmt.name == "tfrecord" else read_index
            starts, lengths = walk(f.at, size, name)
            n = int(lengths[-1]) if fmt.name == "array_record" else len(starts)
            head = np.concatenate([starts, lengths]).tobytes()  # the index, not read again
        else:
            assert datasets, "FileSource's config refuses hdf5 without datasets"
            n = hdf5_rows(f, name=name, datasets=datasets)
        return n, f.gets, f.nbytes, head
    finally:
        close()


def header_counts(
    files: FileList,
    fmt: FileFormat,
    datasets: Sequence[str] | None,
    depth: int,
    heads: dict[int, bytes] | None = None,
    indexes: TarIndexes | None = None,
    corrupt: dict[int, DataError] | None = None,
) -> tuple[NDArray[np.int64], CountStats]:
    """Every file's count (the leading axis of its array), ``depth`` files at a time.

    NPY: the header's ``shape[0]``. NPZ: that of the first member named in
    ``datasets`` (else the zip's first member); the others are checked against
    it when the file is decoded. HDF5: each named dataset's ``shape[0]``, which
    must agree. An array with no leading axis, or a header that does not parse,
    is a :class:`FormatError` naming the file; storage errors name the object.

    ``heads``: filled with NPY files' header bytes (file -> bytes up to the payload),
    or TFRecord files' record indexes (ArrayRecord files' chunks), up to ``HEAD_BYTES``
    in all, for the reads by rows to start from
    (:meth:`~headrace.formats._npy_ranges.RangedNpy.seed`,
    :meth:`~headrace.formats._tfrecord_ranges.RangedTfrecord.seed`). ``indexes``: where
    tar shards' indexes walked to count them are kept, for the reads.
    ``corrupt`` (``on_corrupt="replace"``): where a file whose header is damaged (a
    :class:`DataError`: it does not parse, an array without rows, a dataset or member
    it lacks) is kept, by file, with a count of 0 (no sample of it is planned), not
    raised; a storage error still raises. A tar shard where samples lack a field asked
    is counted whole there, its :class:`~headrace.formats._tar.BrokenSample` kept (each
    such sample is replaced when read: until 2026-12-07 the shard was counted 0, its
    other samples lost); one cut short is counted by its samples before the cut (the
    same at every walk, so the plan is too), the rest lost. Counts with one are not kept
    in the cache.
    """
    if fmt.name not in _FIRST:
        raise ConfigError(
            'samples_per_file="header" reads counts from NPY, NPZ, HDF5 or tar headers, '
            f"TFRecord record headers or ArrayRecord footers; {fmt.name} files hold one "
            "sample each"
        )
    t0 = time.perf_counter()
    n = len(files)
    stats = CountStats(files=n, depth=depth)
    kept = _kept_counts(files, fmt, datasets)
    if kept is not None:
        cached = kept[0].read(*kept[1:])
        if cached is not None:
            stats.from_cache = True
            stats.seconds = time.perf_counter() - t0
            return cached.view(np.int64).copy(), stats
    counts = np.zeros(n, dtype=np.int64)
    lock = threading.Lock()
    kept_bytes = 0
    queue = RequestQueue(depth, name="headrace-counts") if files.remote else None

    def job(i: int) -> None:
        nonlocal kept_bytes
        c, reads, nbytes, head = _count_one(fmt, datasets, files, i, queue, corrupt is None)
        counts[i] = c
        broken = None
        if isinstance(head, TarIndex) and corrupt is not None:
            name = files.name(i)
            broken = broken_fields(head, datasets, name) if datasets else broken_alike(head, name)
        if isinstance(head, TarIndex) and head.cut:  # (walked so under replace alone)
            keys = () if broken is None else broken.keys
            broken = BrokenSample(head.cut + (f"; and {broken}" if broken else ""), keys, cut=True)
        with lock:
            stats.reads += reads
            stats.bytes += nbytes
            if broken is not None:
                assert corrupt is not None
                corrupt[i] = broken
            if isinstance(head, TarIndex):
                if indexes is not None:
                    indexes.keep(i, head)
            elif heads is not None and head is not None and kept_bytes + len(head) <= HEAD_BYTES:
                heads[i] = head
                kept_bytes += len(head)

    failed: list[tuple[int, HeadraceError]] = []
    try:
        # Left by an error (a Ctrl-C), a count stuck in stalled storage is not waited for.
        with one_call_pool(min(depth, n), thread_name_prefix="headrace-counts") as pool:
            futures = [pool.submit(job, i) for i in range(n)]
            try:
                # In file order: the first error raised is the first file's, every run;
                # the others are counted on (up to MOST_FAILED), so one run names them all.
                for i, fut in enumerate(futures):
                    try:
                        result(fut)
                    except DataError as exc:
                        if corrupt is None or isinstance(exc, UnsupportedFormError):
                            failed.append((i, exc))  # (no damage either: raised)
                        else:  # (a storage error is no damage of the file: raised)
                            counts[i] = 0
                            corrupt[i] = exc
                        if len(failed) >= MOST_FAILED:
                            raise _first_of(files, failed, stopped=True) from None
                    except HeadraceError as exc:
                        failed.append((i, exc))
                        if len(failed) >= MOST_FAILED:
                            raise _first_of(files, failed, stopped=True) from None
                if failed:
                    raise _first_of(files, failed, stopped=False) from None
            except BaseException:
                for fut in futures:
                    fut.cancel()
                raise
    finally:
        if queue is not None:
            queue.close()
    if kept is not None and not corrupt:  # (a restart must find the damaged files again)
        kept[0].write(*kept[1:], counts)
    stats.seconds = time.perf_counter() - t0
    return counts, stats


def _kept_counts(
    files: FileList, fmt: FileFormat, datasets: Sequence[str] | None
) -> tuple[ObjectCache, str, int, str] | None:
    """Where the object cache keeps this listing's counts (cache, name, size, tag), or
    ``None`` (no cache; an object without a strong ETag, whose count could change
    unseen). One entry for the whole listing, named by every object's cache name, size
    and ETag, the format and the datasets: a restart counts with one local read, not
    a ranged GET a file, and any object replaced since (a new ETag) counts them again."""
    cache, key = files.cache, files.cache_key
    if cache is None or key is None or not files.remote:
        return None
    h = hashlib.sha256(f"{fmt.name}\0{list(datasets or [])}".encode())
    for i, (size, etag) in enumerate(zip(files.sizes, files.etags, strict=True)):
        if etag is None or etag.startswith("W/"):
            return None
        h.update(f"\0{key(i)}\0{size}\0{etag}".encode())
    return cache, f"headrace-header-counts:{h.hexdigest()}", 8 * len(files.sizes), "v1"


#: Header failures counted before the count stops (the first is raised, the rest named).
MOST_FAILED = 100


def _first_of(
    files: FileList, failed: list[tuple[int, HeadraceError]], stopped: bool
) -> HeadraceError:
    """The first failed file's error, with a note naming the others (``stopped``: the
    count stopped at :data:`MOST_FAILED`, later files were not read), and the others'
    errors as its ``others_failed`` (``headrace check --json`` lists each: the note names 8)."""
    first = failed[0][1]
    setattr(first, "others_failed", [exc for _, exc in failed[1:]])  # noqa: B010 (undeclared)
    others = [files.name(i) for i, _ in failed[1:]]
    if others:
        more = f" (stopped at {MOST_FAILED} failures: later files not read)" if stopped else ""
        files_ = "file" if len(others) == 1 else "files"
        shown = some_of(others)
        first.add_note(f"the headers of {len(others)} other {files_} failed too{more}: {shown}")
    return first


def check_samples_per_file(spf: object) -> SamplesPerFile:
    """``samples_per_file`` as a config keeps it: an integer >= 1, ``"header"``, or a
    tuple of counts >= 0 (from any sequence of integers)."""
    if isinstance(spf, str):
        if spf != "header":
            raise ConfigError(
                f"samples_per_file must be an integer >= 1, a list of counts (one per file) or "
                f'"header" (got {spf!r}).'
            )
        return spf
    if isinstance(spf, (int, np.integer)) and not isinstance(spf, bool):
        if spf < 1:
            raise ConfigError(f"samples_per_file must be >= 1 (got {spf}).")
        return int(spf)
    try:
        counts = list(spf)  # type: ignore[call-overload]
    except TypeError:
        raise ConfigError(
            f"samples_per_file must be an integer >= 1, a list of counts (one per file) or "
            f'"header" (got {spf!r}).'
        ) from None
    for i, c in enumerate(counts):
        if isinstance(c, bool) or not isinstance(c, (int, np.integer)) or c < 0:
            raise ConfigError(
                f"samples_per_file[{i}] is {c!r}; each file's count must be an integer >= 0."
            )
    return tuple(int(c) for c in counts)


def short_counts(spf: object) -> str:
    """``samples_per_file`` for a message: a long list as its ends and its length."""
    if isinstance(spf, tuple) and len(spf) > 6:
        return f"[{spf[0]}, {spf[1]}, ..., {spf[-1]}] ({len(spf):,} counts)"
    return repr(list(spf) if isinstance(spf, tuple) else spf)


def _sort_key(p: str | os.PathLike[str], urls: bool) -> str:
    # As list_files sorts a list of files: paths as strings, URLs by the names they hold
    # (file:// and http(s):// ones decoded: "%7A.npy" is "z.npy", after "b.npy").
    text = os.fspath(p)
    return named_url(text) if urls else text


def _patterns(given: object, files: FileList) -> str:
    """The glob patterns of a list of files, for a message (``""``: none). Their matches
    are listed sorted among the paths, as a folder's files are: a count for each file
    listed follows ``src.files.keys``, as for one pattern. A local path is one as
    :func:`local_pattern` says; an object URL with a wildcard where the listing holds
    another number of objects than the list's URLs (an object may have one in its name)."""
    if not isinstance(given, list):
        return ""
    texts = [os.fspath(p) for p in given]
    if any(is_object_url(t) for t in texts):
        found = [t for t in texts if is_url_pattern(t)] if len(texts) != len(files) else []
    else:
        found = [t for t in texts if local_pattern(t) is not None]
    return f"glob pattern(s) {some_of(found)}" if found else ""


def resolve_counts(
    spf: object,
    given: object,
    files: FileList,
    fmt: FileFormat,
    datasets: Sequence[str] | None,
    depth: int,
    heads: dict[int, bytes] | None = None,
    indexes: TarIndexes | None = None,
    corrupt: dict[int, DataError] | None = None,
) -> tuple[NDArray[np.int64] | None, CountStats | None]:
    """Each listed file's count (``None`` for a fixed ``samples_per_file``), in the
    order of ``files``, and what reading headers cost (``None`` if none was read).

    ``given``: what the source was opened with. A list of counts follows a list of
    files as given (both are sorted together, as the listing sorts the files);
    for a directory, pattern or prefix, the sorted keys, and for a list that holds
    patterns (a count for each file a pattern matches, not for the pattern).
    ``heads``, ``indexes``, ``corrupt``: see :func:`header_counts`.
    """
    if isinstance(spf, int):
        return None, None
    if spf == "header":
        return header_counts(files, fmt, datasets, depth, heads, indexes, corrupt)
    assert isinstance(spf, tuple)
    n = len(files)
    patterns = _patterns(given, files)
    if isinstance(given, list) and not patterns:
        if len(spf) != len(given):
            raise ConfigError(
                f"samples_per_file has {len(spf):,} counts for the {len(given):,} files listed; "
                "expected one count per file, in the order of the list"
            )
        urls = any(is_object_url(str(p)) for p in given)
        # (A file listed twice was refused by list_files.)
        pairs = sorted(zip((_sort_key(p, urls) for p in given), spf, strict=True))
        return np.array([c for _, c in pairs], dtype=np.int64), None
    if len(spf) != n:
        under = f"matched by the list's {patterns}" if patterns else f"under {files.url}"
        raise ConfigError(
            f"samples_per_file has {len(spf):,} counts for the {n:,} files {under}; "
            "expected one count per file, in the order of src.files.keys "
            f"(sorted: {files.keys[0]!r} first, {files.keys[-1]!r} last)"
        )
    return np.array(spf, dtype=np.int64), None
