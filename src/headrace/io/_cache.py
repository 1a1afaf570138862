"""A local disk cache of objects (whole, or the ranges read of them), filled as they are read.

Training reads the same objects every epoch. With ``cache_dir`` set, the
first read of an object from the store also writes it to local disk, and
every later read (the next epoch, a restarted run, another worker or rank on
the same machine) reads the local copy. Nothing is read ahead of its use, so
a run never waits for the cache to fill.

An entry is named by a hash of ``(object URL, size, ETag)`` (and the byte
range, for a range read: a token file's blocks, a row window, a Parquet row
group's chunks, each the same range every epoch): an object that is replaced
gets a new ETag and new entries, never the old bytes. An object read as 64 KiB
blocks (rows of NPY, NPZ, HDF5, tar, TFRecord and MDS files) has its blocks joined
into its whole entry once all are there, with a table of their checksums
(:meth:`ObjectCache.blocks_read`). Objects
listed without an ETag, or with a weak one (``W/"..."``, which an HTTP server
may keep for other bytes of equivalent meaning, or build from a modification
time in whole seconds), are not cached (nothing would tell a replaced one
apart). Entries are written to a temporary name and renamed into place, so a
reader (any process) sees a whole entry or none (a writer killed mid-entry leaves its
temporary, unlocked: the next process's first write removes it); each ends with the CRC-32 of
its bytes, started from its name, and an entry whose size or checksum is not
right (a disk that lost or changed a write, or put it under another entry's
name) is removed and its bytes read from the store again. Each entry is checked at
its first read in a process (a joined one a block at a time), then remembered by
its file and its ctime (``CHECKED``: one written over in place is checked again).

The cache never evicts: it fills until it holds ``max_bytes`` of disk space
(whole filesystem blocks: a 500-byte entry takes 4 KiB on ext4; counted for
every process sharing the directory, in one ledger under a file lock) (or until its
filesystem would have less than :func:`reserve_bytes` free: 5% of it, at least
1 GiB, so checkpoints and logs on the same disk still fit), then later objects
are read from the store only. Training visits every object once per epoch in
a fresh random order, so keeping whatever was cached first hits as often as
any eviction policy could (a fraction ``cache / dataset`` of reads) and
writes nothing more. :meth:`ObjectCache.prune` (``headrace cache DIR
--prune-days N`` or ``--clear``) removes entries not used for a while, or all.
The directory's files are ``headrace.io._cache_files``; the byte count,
``headrace.io._cache_space``.

The cache is a copy: when it cannot be written (disk full, permissions) or a
local read fails, the object is read from the store, a warning says why
once, and the run goes on with the same bytes.
"""

from __future__ import annotations

import errno
import hashlib
import os
import secrets
import threading
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import Any, TypeGuard, cast

import numpy as np
from numpy.typing import NDArray

from headrace._warn import warn_user
from headrace.errors import ConfigError, StorageError
from headrace.io._cache_files import (
    MAGIC,
    MAGIC_V1,
    TMP,
    TRAILER,
    disk_bytes,
    hold,
    is_entry,
    name_seed,
    remove_dead,
    remove_unused,
    scan,
)
from headrace.io._cache_space import CacheSpace, Reservation, reserve_bytes
from headrace.io._file import LocalFile

__all__ = ["CacheStats", "ObjectCache", "open_cache"]

#: Byte ranges ``[a, b)`` of an object, or a function that gives them.
Spans = list[tuple[int, int]] | Callable[[], list[tuple[int, int]]]

#: A whole entry read by ranges is checked against its checksum this much at a time.
CHECK_PIECE = 1 << 20
#: The entries read by ranges a process remembers as checked, each as a 64-bit hash of
#: its name and file (one past them is checked again when read, and an arbitrary one
#: forgotten for each added): 16 GiB of 64 KiB blocks in ~18 MB. Until 2026-12-05 an
#: ordered dict of names and files held 32,768 (2 GiB of blocks) in ~11 MB: a warm epoch
#: of a larger cache read every block whole and its checksum for each row it asked.
CHECKED = 1 << 18
#: The objects read by blocks a process counts the block reads of, to join their blocks
#: (:meth:`ObjectCache.blocks_read`); past them, the least recently read is forgotten.
JOINING = 1 << 16
#: The tables of block checksums of joined entries a process keeps (4 bytes a 64 KiB
#: block: 1 KiB for a 16 MB object); past them, the first read is forgotten.
TABLES = 1 << 14
#: The temporary name a join writes an object's whole entry under: one a process at a
#: time, for :meth:`ObjectCache._put` creates it only where it is not there. A temporary
#: of pid 0 (no writer's), "join" in hex: a dead joiner's is removed as any dead writer's.
CLAIM = "0-6a6f696e"

# Write errors after which this process stops trying.
_STOP_WRITING = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOTDIR}
)


@dataclass(slots=True)
class CacheStats:
    """What a cache did in this process.

    ``hits``/``hit_bytes``: reads served from local disk; ``misses``: reads
    that went to the store; ``written``/``written_bytes``: entries added;
    ``full``: objects not written because the cache was full; ``uncacheable``:
    objects without a strong ETag (none, or a weak ``W/"..."``); ``bad_entries``:
    entries of the wrong size, removed; ``errors``: local reads or writes that
    failed (the store served); ``joined``: objects whose block entries this
    process joined into one whole entry (:meth:`ObjectCache.blocks_read`; not
    counted in ``written``: no byte came from the store).
    """

    hits: int = 0
    hit_bytes: int = 0
    misses: int = 0
    written: int = 0
    written_bytes: int = 0
    full: int = 0
    uncacheable: int = 0
    bad_entries: int = 0
    errors: int = 0
    joined: int = 0

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


class ObjectCache:
    """Objects (whole, or the byte ranges sources read of them) kept in
    ``directory``, up to ``max_bytes`` (``None``: up to the filesystem's free
    space less :func:`reserve_bytes`). Safe to share between threads and
    processes; counters are this process's."""

    def __init__(self, directory: str | os.PathLike[str], max_bytes: int | None = None) -> None:
        if max_bytes is not None:
            if (
                isinstance(max_bytes, bool)
                or not isinstance(max_bytes, int | np.integer)
                or max_bytes < 0
            ):
                raise ConfigError(
                    f"cache_bytes must be an integer >= 0 or None (got {max_bytes!r})."
                )
            max_bytes = int(max_bytes)  # (np.int64 was refused, as no other count is)
        if not os.fspath(directory):  # (abspath("") is the working directory: filled)
            raise ConfigError(
                "cache_dir='' names no directory; give the directory to keep the copies "
                "in, or cache_dir=None for no cache."
            )
        # "~/..." as local paths read it (else a folder named "~" in the working directory).
        given = os.fspath(directory)
        expanded = os.path.expanduser(given)
        if expanded == given and given.split(os.sep, 1)[0] == "~":
            # HOME unset and a uid without a password entry (`docker run -u 12345`): the
            # copies went to a folder named "~" under the working directory, said nowhere.
            raise ConfigError(
                f"cache_dir {given!r}: '~' names no home folder here (HOME is unset and uid "
                f"{os.getuid()} has no entry in the password database); give cache_dir an "
                "absolute path on local disk, or set HOME"
            )
        self.directory = os.path.abspath(expanded)
        if os.path.exists(self.directory) and not os.path.isdir(self.directory):
            raise ConfigError(f"cache_dir {self.directory}: exists and is not a directory.")
        self.max_bytes = max_bytes
        self.stats = CacheStats()
        self._lock = threading.Lock()  # stats and warnings
        self._space = CacheSpace(self.directory, max_bytes)
        self._stopped: str | None = None  # why this process stopped writing
        self._warned: set[str] = set()
        self._swept = False  # dead writers' temporaries removed, at this one's first write
        # Whole entries read by ranges whose checksum this process checked (see read_ranges).
        self._checked: set[int] = set()
        # Objects read by blocks: hash of (url, size, etag) -> (block reads, the count at
        # which to look for all of its blocks next), least recently read first.
        self._block_reads: dict[int, tuple[int, int]] = {}
        # Block checksums of joined whole entries, by the entry's checked key (TABLES).
        self._tables: dict[int, NDArray[np.uint32]] = {}
        self._unchecked: dict[int, bytearray] = {}  # ... and which blocks were checked

    #: Bytes each entry adds to the data it keeps (its checksum trailer).
    TRAILER_BYTES = TRAILER.size

    def __repr__(self) -> str:
        return f"ObjectCache({self.directory!r}, max_bytes={self.max_bytes})"

    def __getstate__(self) -> dict[str, Any]:
        return {"directory": self.directory, "max_bytes": self.max_bytes}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["directory"], state["max_bytes"])  # type: ignore[misc]

    def path(self, url: str, size: int, etag: str, offset: int = 0, length: int = -1) -> str:
        """Where the entry of this version of the object (or of its bytes ``[offset,
        offset + length)``; ``length=-1``: to its end) lives."""
        key = f"{url}\0{size}\0{etag}"
        if length < 0:  # named by its length, as write() names it
            length = size - offset
        if (offset, length) != (0, size):  # a whole object is its own entry
            key += f"\0{offset}\0{length}"
        return self._named(key)

    def _named(self, key: str) -> str:
        h = hashlib.sha256(key.encode()).hexdigest()
        return os.path.join(self.directory, h[:2], h[2:40])

    def _table_path(self, url: str, size: int, etag: str) -> str:
        """The entry of the block checksums of the object's whole entry, where it was
        joined from blocks (see :meth:`_join`)."""
        return self._named(f"{url}\0{size}\0{etag}\0blocks")

    @property
    def writing(self) -> bool:
        """Whether entries may still be written: not stopped, and not found full in this
        process (the cache never evicts: once full, it stays so until pruned)."""
        with self._lock:
            return self._stopped is None and self.stats.full == 0

    def cacheable(self, etag: str | None) -> TypeGuard[str]:
        """Whether an object with this ETag can be cached: a strong one. ``None``, an
        empty tag (``ETag: ""``: the same for every version, so a replaced object of the
        same size was served its old bytes) and a weak tag (``W/"..."``: equivalent
        content, not the same bytes) are counted, not cached."""
        if not etag or etag.startswith("W/"):
            with self._lock:
                self.stats.uncacheable += 1
            return False
        return True

    def has(self, url: str, size: int, etag: str, offset: int = 0, length: int = -1) -> bool:
        """Whether an entry exists (one ``stat``, a miss counted if not;
        :meth:`read_into` still checks it)."""
        if os.path.exists(self.path(url, size, etag, offset, length)):
            return True
        self._miss()
        return False

    # -- reading -------------------------------------------------------------------
    def read(self, url: str, size: int, etag: str) -> NDArray[np.uint8] | None:
        """The object's bytes from local disk, or ``None`` (then read it from the store)."""
        out = np.empty(size, dtype=np.uint8)
        return out if self.read_into(out, url, size, etag) else None

    def read_into(self, out: NDArray[Any], url: str, size: int, etag: str, offset: int = 0) -> bool:
        """Fill ``out`` with the object's bytes at ``offset`` from local disk; ``False``
        if there is no (good) entry (then read them from the store)."""
        if not out.flags.c_contiguous:  # reshape would copy: the bytes would go nowhere
            raise ConfigError(f"read_into needs a C-contiguous buffer (got strides {out.strides})")
        out = out.reshape(-1).view(np.uint8)  # any C-contiguous array, counted in bytes
        want = out.size
        path = self.path(url, size, etag, offset, want)
        # Checked at its first read in this process, then read as it is (a token file's
        # 4 MiB blocks, read again at each visit of their window, paid the checksum each
        # time, ~1 ms a block: 8,000 batches 0.474 -> 0.341 s).
        done = self._read_checked(path, want, [(0, want)], out, 0)
        if done is not None:
            return done
        f = self._open(path, want)
        if f is None:
            return False
        with f:
            trailer = np.empty(TRAILER.size, np.uint8)
            try:
                key = _file_key(path, f)  # (before the bytes are read)
                f.pread_into(out, 0)
                f.pread_into(trailer, want)
            except StorageError as exc:  # EIO, or cut short under us: the store has it
                self._failed("read", path, exc)
                self._miss()
                return False
            if not self._good(path, f, trailer, want, zlib.crc32(out.data, name_seed(path))):
                return False
            with self._lock:
                self._remember(key)
        self.hit(want)
        return True

    def read_ranges(
        self,
        url: str,
        size: int,
        etag: str,
        spans: list[tuple[int, int]],
        out: NDArray[np.uint8],
        offset: int = 0,
        length: int = -1,
    ) -> bool:
        """Fill ``out[a:b]`` with the object's bytes ``[a, b)`` for each of ``spans``, from
        its whole entry, or from the entry of its bytes ``[offset, offset + length)``
        that holds the spans (a block); ``False`` if there is no (good) entry (then read
        them from the store). The entry's checksum covers all its bytes: it is read
        through once a process, ``CHECK_PIECE`` at a time (nothing held), then only the
        spans are read."""
        path = self.path(url, size, etag, offset, length)
        want = size - offset if length < 0 else length
        done = self._read_checked(path, want, spans, out, offset)
        if done is not None:
            return done
        f = self._open(path, want)
        if f is None:
            return False
        whole = want == size  # (then offset is 0)
        with f:
            try:
                table = self._table_path(url, size, etag) if whole else None
                if not self._checked_spans(path, f, want, spans, table):
                    return False
                for a, b in spans:
                    f.pread_into(out[a:b], a - offset)
            except StorageError as exc:
                self._failed("read", path, exc)
                self._miss()
                return False
        self.hit(sum(b - a for a, b in spans))
        return True

    def open_whole(self, url: str, size: int, etag: str, spans: Spans) -> LocalFile | None:
        """The object's whole entry, open, its bytes ``spans`` (or a function that gives
        them, called only where they must be checked) checked (as by
        :meth:`read_ranges`), for the caller to map, read those spans of (counting
        their bytes: :meth:`hit`) and close; ``None`` where there is none (not
        counted: the caller reads another way), or it is not good (counted as any
        read), or on a network or FUSE mount or a filesystem that cannot map (where
        a page the storage fails is ``SIGBUS``, not an error)."""
        path = self.path(url, size, etag)
        if not os.path.exists(path):
            return None
        f = self._open(path, size)
        if f is None:
            return None
        try:
            if self.whole_checked(url, size, etag, f, spans) and not f.network and f.mappable:
                return f
        except StorageError as exc:
            self._failed("read", path, exc)
            self._miss()
        f.close()
        return None

    def whole_checked(self, url: str, size: int, etag: str, f: LocalFile, spans: Spans) -> bool:
        """Whether the bytes ``spans`` lie in of the object's whole entry, open as ``f``
        (kept open by the caller: :meth:`open_whole`), are what was written, each block
        checked once a process (see :meth:`_checked_spans`); a failed read is counted
        as any read's."""
        path = self.path(url, size, etag)
        try:
            return self._checked_spans(path, f, size, spans, self._table_path(url, size, etag))
        except StorageError as exc:
            self._failed("read", path, exc)
            self._miss()
            return False

    def blocks_read(self, url: str, size: int, etag: str, block: int, n: int) -> None:
        """Count ``n`` reads of the object's ``block``-byte blocks (each an entry of its
        own: :func:`headrace.formats._file_list.FileList.fetch_ranges`); once this
        process has counted as many as the object has blocks (then twice that, and so
        on), if every block is there, join them into the object's whole entry and
        remove them. A read of rows then opens one entry, not one a block: a warm
        epoch of 16,000 rows of 4 KiB from 4 objects of 16 MB opened 16,000 block
        entries (0.38 s; 0.22 once joined; 0.11-0.17 from local files)."""
        blocks = -(-size // block)
        if blocks < 2 or n <= 0:  # (one block is the whole entry)
            return
        key = hash((url, size, etag))
        with self._lock:
            seen, due = self._block_reads.pop(key, (0, blocks))
            seen += n
            look = seen >= due
            if look:
                due = 2 * seen
            if len(self._block_reads) >= JOINING:
                del self._block_reads[next(iter(self._block_reads))]
            self._block_reads[key] = (seen, due)
        if look and self._join(url, size, etag, block):
            with self._lock:
                self._block_reads.pop(key, None)

    def _join(self, url: str, size: int, etag: str, block: int) -> bool:
        """Write the object's whole entry from its ``block``-byte block entries, each
        checked against its checksum (one ``block`` of memory at a time), then remove
        them; whether the whole entry is there. Nothing is written unless every block
        is there and good (a damaged one is left to the read that finds it), or
        where the whole entry would not fit (the blocks stay: a cache full by this
        count is not full for blocks)."""
        whole = self.path(url, size, etag)
        if os.path.exists(whole):
            return True
        if not self.writing:
            return False
        starts = range(0, size, block)
        paths = [self.path(url, size, etag, a, min(block, size - a)) for a in starts]
        if not all(map(os.path.exists, paths)):
            return False
        self._sweep()
        found: list[tuple[str, tuple[int, int]]] = []
        buf = np.empty(block + TRAILER.size, np.uint8)
        crcs = np.empty(len(paths) + 1, "<u4")  # the block size, then each block's CRC
        crcs[0] = block

        def blocks() -> Iterator[memoryview]:
            for k, (a, path) in enumerate(zip(starts, paths, strict=True)):
                n = min(block, size - a)
                got = buf[: n + TRAILER.size]
                try:
                    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
                    try:
                        st = os.fstat(fd)
                        if st.st_size != got.size or os.preadv(fd, [cast(Any, got)], 0) != got.size:
                            raise _Abandon
                    finally:
                        os.close(fd)
                except OSError as exc:  # removed meanwhile, or unreadable
                    raise _Abandon from exc
                magic, kept, length = TRAILER.unpack(got[n:].tobytes())
                if (
                    magic != MAGIC
                    or length != n
                    or kept != zlib.crc32(got[:n].data, name_seed(path))
                ):
                    raise _Abandon
                found.append((path, (st.st_dev, st.st_ino)))
                crcs[k + 1] = zlib.crc32(got[:n].data, _block_seed(whole, k))
                yield got[:n].data

        # Claimed: where several processes count enough block reads at once (ranks of a
        # node reading one dataset), each wrote a copy of the object and all but one
        # were thrown away.
        if not self._put(whole, size, blocks(), count_full=False, claim=True):
            return os.path.exists(whole)  # (another process's join may have put it)
        # Its blocks' checksums, for reads to check only the blocks they touch (without,
        # each process reads the whole entry through once).
        self._put(self._table_path(url, size, etag), crcs.nbytes, [crcs], count_full=False)
        for path, identity in found:
            self._space.remove(path, identity)
        with self._lock:
            self.stats.joined += 1
        return True

    def _read_checked(
        self,
        path: str,
        want: int,
        spans: list[tuple[int, int]],
        out: NDArray[np.uint8],
        offset: int,
    ) -> bool | None:
        """:meth:`read_ranges` of an entry this process checked already, in a few system
        calls (open, fstat, a ``pread`` a span, close: a warm epoch of rows reads an
        entry a row, and a ``LocalFile`` an entry cost 4x the read); ``False``: no
        entry, or a read failed (counted); ``None``: not checked yet, or not ``want``
        bytes, which :meth:`read_ranges` then sees to."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except (FileNotFoundError, NotADirectoryError):
            self._miss()
            return False
        except OSError:
            return None  # (LocalFile says what and counts it)
        try:
            st = os.fstat(fd)
            key = _checked_key(path, st)
            with self._lock:
                if st.st_size != want + TRAILER.size:
                    return None
                if key not in self._checked and not self._blocks_checked(key, spans):
                    return None
            for a, b in spans:
                n = os.preadv(fd, [cast(Any, out[a:b])], a - offset)
                if n != b - a:  # (it held want bytes when opened: cut short since)
                    raise OSError(errno.EIO, f"read {n} of {b - a} bytes at {a - offset}")
        except OSError as exc:  # EIO: the store has the bytes
            self._failed("read", path, exc)
            self._miss()
            return False
        finally:
            os.close(fd)
        self.hit(sum(b - a for a, b in spans))
        return True

    def _checked_spans(
        self,
        path: str,
        f: LocalFile,
        size: int,
        spans: Spans,
        table: str | None,
    ) -> bool:
        """Whether the bytes of entry ``f`` (of ``size`` bytes) that ``spans`` lie in
        are what was written: where ``table`` (the path of a whole entry's block
        checksums, written when it was joined) holds them, the blocks the spans touch,
        each checked once a process; else the whole entry, once (see
        :meth:`_checked_whole`). Checked whole, a joined entry was read through by
        every process at its first read of it, however few of its rows it wanted."""
        key = _file_key(path, f)
        with self._lock:
            if key in self._checked:
                return True
        spans = spans() if callable(spans) else spans
        with self._lock:
            if self._blocks_checked(key, spans):
                return True
        crcs = None if table is None else self._table_of(table, key, size)
        if crcs is None:
            return self._checked_whole(path, f, size)
        block = int(crcs[0])
        todo = [
            k
            for k in _touched(spans, block)
            if _block_key(key, k) not in self._checked  # (a set: reads need no lock)
        ]
        piece = np.empty(block, np.uint8)
        for k in todo:
            view = piece[: min(block, size - k * block)]
            f.pread_into(view, k * block)
            if zlib.crc32(view.data, _block_seed(path, k)) != int(crcs[k + 1]):
                self._remove_bad(path, "bytes that are not what was written (checksum)", f.identity)
                self._miss()
                return False
        with self._lock:
            for k in todo:
                self._remember(_block_key(key, k))
            # Every block checked: the entry is, and its reads take the quick way (a
            # warm epoch that looked up each read's blocks took 1.18x as long).
            flags = self._unchecked.get(key)
            if flags is not None:  # (exact: a block forgotten and checked again counts once)
                for k in todo:
                    flags[k] = 1
                if 0 not in flags:
                    del self._unchecked[key]
                    self._tables.pop(key, None)
                    self._remember(key)
        return True

    def _blocks_checked(self, key: int, spans: list[tuple[int, int]]) -> bool:
        """(Under the lock.) Whether every block of entry ``key`` the spans touch was
        checked against its table (:meth:`_checked_spans`)."""
        crcs = self._tables.get(key)
        if crcs is None:
            return False
        block = int(crcs[0])
        return all(_block_key(key, k) in self._checked for k in _touched(spans, block))

    def _table_of(self, table: str, key: int, size: int) -> NDArray[np.uint32] | None:
        """The block checksums in entry ``table`` for the whole entry ``key`` of
        ``size`` bytes (read and checked once, then kept: 4 bytes a block), or
        ``None`` where there are none (a damaged table is removed)."""
        with self._lock:
            crcs = self._tables.get(key)
        if crcs is not None:
            return crcs
        try:
            fd = os.open(table, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None  # none: the whole entry is checked whole
        try:
            st = os.fstat(fd)
            raw = os.pread(fd, st.st_size, 0)
        except OSError:
            return None
        finally:
            os.close(fd)
        n = len(raw) - TRAILER.size
        if n >= 8 and n % 4 == 0:
            magic, kept, length = TRAILER.unpack(raw[n:])
            crcs = np.frombuffer(raw[:n], "<u4").astype(np.uint32)
            block = int(crcs[0])
            good = magic == MAGIC and length == n and kept == zlib.crc32(raw[:n], name_seed(table))
            if good and block > 0 and len(crcs) - 1 == -(-size // block):
                with self._lock:
                    if len(self._tables) >= TABLES:
                        first = next(iter(self._tables))
                        del self._tables[first]
                        self._unchecked.pop(first, None)
                    self._tables[key] = crcs
                    self._unchecked[key] = bytearray(len(crcs) - 1)
                return crcs
        what = "block checksums that are not what was written (the entry is checked whole)"
        self._remove_bad(table, what, (st.st_dev, st.st_ino))
        return None

    def _remember(self, key: int) -> None:
        """(Under the lock.) Remember ``key`` as checked (``CHECKED`` at most)."""
        if len(self._checked) >= CHECKED:
            self._checked.pop()
        self._checked.add(key)

    def _checked_whole(self, path: str, f: LocalFile, size: int) -> bool:
        """Whether entry ``f`` (of ``size`` bytes) holds what was written: checked once
        (its file's identity remembered, ``CHECKED`` entries at most), else removed."""
        key = _file_key(path, f)
        with self._lock:
            if key in self._checked:
                return True
        trailer = np.empty(TRAILER.size, np.uint8)
        f.pread_into(trailer, size)
        piece = np.empty(min(size, CHECK_PIECE), np.uint8)
        crc = name_seed(path)
        for at in range(0, size, CHECK_PIECE):
            view = piece[: min(CHECK_PIECE, size - at)]
            f.pread_into(view, at)
            crc = zlib.crc32(view.data, crc)
        if not self._good(path, f, trailer, size, crc):
            return False
        with self._lock:
            self._remember(key)
        return True

    def _open(self, path: str, want: int) -> LocalFile | None:
        """Entry ``path``, open, if it is there and holds ``want`` bytes (else ``None``,
        a miss counted; one of another size removed)."""
        try:
            f = LocalFile(path)
        except StorageError as exc:
            if exc.errno not in (errno.ENOENT, errno.ENOTDIR):  # else: no such entry
                self._failed("read", path, exc)
            self._miss()
            return None
        if f.size != want + TRAILER.size:
            f.close()
            what = (
                f"{f.size - TRAILER.size} bytes, not {want}"
                if f.size >= TRAILER.size  # (an empty one read "-16 bytes")
                else f"{f.size} bytes, fewer than its {TRAILER.size}-byte checksum trailer "
                f"(cut short; {want} bytes and the trailer expected)"
            )
            self._remove_bad(path, what, f.identity)
            self._miss()
            return None
        return f

    def _good(
        self, path: str, f: LocalFile, trailer: NDArray[np.uint8], want: int, crc: int
    ) -> bool:
        """Whether ``trailer`` says the entry's ``want`` bytes, of CRC ``crc``, are what
        was written; if not, the entry is removed and a miss counted."""
        magic, kept, length = TRAILER.unpack(trailer.tobytes())
        if magic == MAGIC_V1:
            self._remove_bad(
                path,
                "the format of an earlier headrace (its checksum is not bound to its name)",
                f.identity,
            )
        elif magic != MAGIC or length != want or crc != kept:
            self._remove_bad(path, "bytes that are not what was written (checksum)", f.identity)
        else:
            return True
        self._miss()
        return False

    def hit(self, n: int) -> None:
        """Count a read of ``n`` bytes served from an entry (by the caller, from a map
        of one: :meth:`open_whole`)."""
        with self._lock:
            self.stats.hits += 1
            self.stats.hit_bytes += n

    def _miss(self) -> None:
        with self._lock:
            self.stats.misses += 1

    def remove_entry(self, path: str, identity: tuple[int, int]) -> OSError | None:
        """Remove entry ``path`` if it is still the file ``identity`` (``st_dev``,
        ``st_ino``) names, its bytes counted out; the error where it could not be
        (``headrace cache --verify``, of a damaged entry)."""
        return self._space.remove(path, identity)

    def _remove_bad(self, path: str, what: str, identity: tuple[int, int]) -> None:
        with self._lock:
            self.stats.bad_entries += 1
        failed = self._space.remove(path, identity)
        if failed is None:
            done = "removed, its bytes are read from the store"
        else:  # a read-only mount, another user's entry: every read of it goes to the store
            done = (
                f"it could not be removed ({failed.strerror or failed}): its bytes are read "
                "from the store each time"
            )
        self._warn_once(
            "bad",
            f"headrace cache {self.directory}: entry {path} has {what}; {done} (further such "
            "entries are counted in stats.bad_entries)",
        )

    # -- writing -------------------------------------------------------------------
    def write(self, url: str, size: int, etag: str, data: Any, offset: int = 0) -> bool:
        """Keep ``data``, the object's bytes at ``offset`` (all of them by default), if
        they fit; whether they were written."""
        self._sweep()
        view = memoryview(data).cast("B")
        path = self.path(url, size, etag, offset, view.nbytes)
        if os.path.exists(path):
            # Another process read the same object meanwhile (ranks reading one token
            # file) and kept it: writing it again would count its bytes twice.
            return False
        if not self._put(path, view.nbytes, [view]):
            return False
        with self._lock:
            self.stats.written += 1
            self.stats.written_bytes += view.nbytes
        return True

    def write_blocks(
        self,
        url: str,
        size: int,
        etag: str,
        block: int,
        runs: list[tuple[int, int]],
        data: NDArray[np.uint8],
    ) -> None:
        """Keep each ``block``-aligned block of the runs ``[a, b)`` of the object
        (``data[a:b]``) as an entry of its own. Blocks written once another process
        had joined the object's blocks (it fetched one of them too, and wrote it after
        the join removed the others) are removed again: no read would open them."""
        spans = [(x, min(x + block, b)) for a, b in runs for x in range(a, b, block)]
        written = [(x, y) for x, y in spans if self.write(url, size, etag, data[x:y], x)]
        whole = self.path(url, size, etag)
        if size <= block or not written or not os.path.exists(whole):
            return  # (one block is the whole entry; a later join removes them)
        for x, y in written:
            path = self.path(url, size, etag, x, y - x)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            self._space.remove(path, (st.st_dev, st.st_ino))

    def _put(
        self,
        path: str,
        n: int,
        parts: Iterable[Any],
        count_full: bool = True,
        claim: bool = False,
    ) -> bool:
        """Write entry ``path``: the ``n`` bytes ``parts`` yields (buffers, one at a time:
        the next may reuse the last one's memory; :class:`_Abandon` from it drops the
        entry), then their checksum; whether it was put in place. ``count_full``: a
        cache without room for it counts as full (no more writes in this process).
        ``claim``: written under the one temporary name of ``path`` (:data:`CLAIM`), so
        that a process finding it there (another is writing the entry) writes nothing."""
        need = self._space.on_disk(n + TRAILER.size)
        reserved = self._reserve(need) if count_full else self._space.reserve(need)
        if reserved is None:
            return False
        tmp = f"{path}{TMP}{CLAIM if claim else f'{os.getpid()}-{secrets.token_hex(4)}'}"
        created = False
        try:
            try:
                fd = _create(tmp)
            except FileExistsError:
                if not claim:
                    raise
                # Another process writes it (or a dead one's temporary, which the next
                # process's sweep removes; until then the blocks serve).
                self._space.give_back(reserved)
                return False
            created = True
            # Locked until renamed: a later process tells a dead writer's temporary by it.
            held = hold(fd)
            try:
                try:
                    crc, wrote = name_seed(path), 0
                    for part in parts:
                        view = memoryview(part).cast("B")
                        crc = zlib.crc32(view, crc)
                        wrote += _write_all(fd, view)
                    if wrote != n:  # (a caller's bug: never an entry of the wrong size)
                        raise _Abandon
                    _write_all(fd, memoryview(TRAILER.pack(MAGIC, crc, n)))
                finally:
                    os.close(fd)
                # Renamed under the byte count's lock, so a measure of the directory (a
                # clear, another process) sees the entry or knows to count it: see
                # CacheSpace.
                placed = self._space.keep(
                    reserved, lambda: _place(tmp, path), lambda: os.unlink(tmp)
                )
            finally:
                if held is not None:
                    os.close(held)
        except (OSError, _Abandon) as exc:
            self._space.give_back(reserved)
            try:
                if created:  # (never another writer's)
                    os.unlink(tmp)
            except OSError:
                pass
            if isinstance(exc, _Abandon):
                return False
            if exc.errno in _STOP_WRITING:  # every later write would fail the same way
                with self._lock:
                    self.stats.errors += 1
                self._stop(f"{exc.strerror or exc} ({path})")
            else:
                self._failed("write", path, exc)
            return False
        if not placed:
            if placed is None:  # filled by others after a clear, while this was written
                with self._lock:
                    self.stats.full += 1
            return False
        return True

    def _reserve(self, size: int) -> Reservation | None:
        """Count ``size`` bytes as used if they fit; ``None`` (counted as full) if not."""
        with self._lock:
            stopped = self._stopped is not None
        reserved = None if stopped else self._space.reserve(size)
        if reserved is None:
            with self._lock:
                self.stats.full += 1
            short = self._space.short
            if short is not None:
                # Else a cache_dir on a nearly full disk kept nothing, and said nothing.
                free, keep = short
                self._warn_once(
                    "reserve",
                    f"headrace cache {self.directory}: not writing: its filesystem has "
                    f"{free / 2**30:.2f} GiB free, under the {keep / 2**30:.2f} GiB the cache "
                    "leaves free for checkpoints and logs (5% of it, at least 1 GiB); objects "
                    "not yet cached are read from the store (free some space, or give a "
                    "cache_dir on a disk with room; counted in stats.full)",
                )
        return reserved

    def summary(self) -> dict[str, Any]:
        """What the directory holds now: entries and their bytes, writers' temporaries,
        files and folders that are not the cache's (``other_files``; a file named as an
        entry is the cache's only where it ends in an entry's trailer), when an entry
        was last read (by the filesystem's access times) or written, and the
        filesystem's free space against the reserve."""
        entries = size = tmps = others = 0
        oldest: float | None = None
        newest: float | None = None
        for path, st, kind in scan(self.directory):
            if st is None:
                others += 1
                continue
            if kind == "tmp":
                tmps += 1
                continue
            if not is_entry(path, st.st_size, touch=False):  # no trailer: a git object
                others += os.path.lexists(path)  # (not one removed meanwhile)
                continue
            entries += 1
            size += disk_bytes(st)
            used = max(st.st_atime, st.st_mtime)
            oldest = used if oldest is None else min(oldest, used)
            newest = used if newest is None else max(newest, used)
        out: dict[str, Any] = {
            "directory": self.directory,
            "entries": entries,
            "bytes": size,
            "temporaries": tmps,
            "other_files": others,
            "oldest_use": oldest,
            "newest_use": newest,
            "max_bytes": self.max_bytes,
        }
        try:
            fs = os.statvfs(self.directory)
            out["filesystem_free_bytes"] = fs.f_bavail * fs.f_frsize
            out["reserve_bytes"] = reserve_bytes(fs.f_blocks * fs.f_frsize)
        except OSError:
            pass
        return out

    def prune(self, unused_s: float = 0.0) -> tuple[int, int]:
        """Remove the entries not read or written for ``unused_s`` seconds (by the
        filesystem's access and change times; 0: every entry) and dead writers'
        temporaries; ``(entries, bytes)`` removed. Only the cache's own files go:
        named as it names them, an entry ending in its trailer (a directory given by
        mistake keeps its files). Safe beside running readers: one that opened an
        entry reads it to the end; one that had not yet finds none and reads the
        store. :class:`StorageError` if an entry could not be removed (a read-only
        mount, another user's entries), once the others are."""
        removed, freed, failed, first = remove_unused(self.directory, unused_s)
        self._space.recount()
        if first is not None:
            where, err = first
            raise StorageError(
                err.errno or errno.EIO,
                f"headrace cache {self.directory}: {failed} entries could not be removed "
                f"({err.strerror or err}; the first: {where}); {removed} removed, "
                f"{freed:,} bytes",
            )
        return removed, freed

    def _sweep(self) -> None:
        """Remove the temporaries of writers killed mid-write (a preempted run's), once a
        cache: else a run restarted within the hour kept them, and a cache complete by
        then (no more writes, no more measures) kept them for good."""
        with self._lock:
            if self._swept:
                return
            self._swept = True
        remove_dead(self.directory)

    def _stop(self, why: str) -> None:
        with self._lock:
            self._stopped = why
        self._warn_once(
            "stop",
            f"headrace cache {self.directory}: stopped writing in this process: {why}; "
            "objects not yet cached are read from the store",
        )

    def _failed(self, what: str, path: str, exc: BaseException) -> None:
        with self._lock:
            self.stats.errors += 1
        self._warn_once(
            what,
            f"headrace cache {self.directory}: a local {what} of {path} failed ({exc}); the "
            "object is read from the store (further failures are counted in stats.errors)",
        )

    def _warn_once(self, key: str, message: str) -> None:
        with self._lock:
            if key in self._warned:
                return
            self._warned.add(key)
        warn_user(message, RuntimeWarning)


def _create(tmp: str) -> int:
    """A writer's temporary, created (with its folder): again where a prune removed the
    folder it emptied between the two (a write beside ``headrace cache --clear`` failed)."""
    for _ in range(2):
        os.makedirs(os.path.dirname(tmp), exist_ok=True)
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        except FileNotFoundError:
            continue
    return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)


def _touched(spans: list[tuple[int, int]], block: int) -> list[int]:
    """The ``block``-byte blocks the spans touch."""
    return sorted({k for a, b in spans if b > a for k in range(a // block, (b - 1) // block + 1)})


def _block_key(key: int, k: int) -> int:
    """How ``ObjectCache._checked`` remembers block ``k`` of entry ``key`` as checked."""
    return hash((key, k))


def _block_seed(path: str, k: int) -> int:
    """Where the CRC of block ``k`` of whole entry ``path`` starts (bound to both)."""
    return zlib.crc32(k.to_bytes(8, "little"), name_seed(path))


def _checked_key(path: str, st: os.stat_result) -> int:
    """How ``ObjectCache._checked`` remembers entry ``path`` as the file ``st`` describes:
    a file renamed over it is another one (``st_ino``), and so is one written over in
    place since (``st_ctime_ns``; a restore, a stray write: until 2026-12-07 a process
    served an entry changed after its check, a flipped byte of an NPY array as data),
    checked again. A write, a truncation and a ``chmod`` set the ctime; a read does not."""
    return hash((path, st.st_dev, st.st_ino, st.st_ctime_ns))


def _file_key(path: str, f: LocalFile) -> int:
    """:func:`_checked_key` of entry ``path``, open as ``f`` (a failed ``fstat``, a
    mount gone, is a failed read: the store has the bytes)."""
    try:
        return _checked_key(path, os.fstat(f.fd))
    except OSError as exc:
        raise StorageError(exc.errno or errno.EIO, f"{path}: cannot stat ({exc.strerror})") from exc


class _Abandon(Exception):
    """An entry's bytes turned out not to be there (a block gone): write nothing."""


def _write_all(fd: int, view: memoryview) -> int:
    done = 0
    while done < view.nbytes:
        done += os.write(fd, view[done:])
    return done


def _place(tmp: str, path: str) -> bool:
    """Rename a written temporary file to its entry (whole or not at all, for every
    reader), unless another writer's copy is there already (then it is removed)."""
    if os.path.exists(path):
        os.unlink(tmp)
        return False
    os.replace(tmp, path)
    return True


def open_cache(
    cache_dir: str | os.PathLike[str] | None, cache_bytes: int | None = None
) -> ObjectCache | None:
    """The cache a source's ``cache_dir=`` and ``cache_bytes=`` name (``None``: no cache)."""
    if cache_dir is None:
        if cache_bytes is not None:
            raise ConfigError(
                f"cache_bytes={cache_bytes!r} needs cache_dir= (where to keep the copies)."
            )
        return None
    return ObjectCache(cache_dir, cache_bytes)
