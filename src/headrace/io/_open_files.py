"""The local files a reader keeps open: pinned while read, the idle ones bounded.

A reader over thousands of shards kept every file it had read open until it was
closed, two descriptors each when mapped (Python's mmap holds a duplicate), so a
plain :class:`~headrace.io.RangeReader` under ``ulimit -n 256`` failed with EMFILE
after 125 files mapped, 248 read positionally. Now a file is *pinned* while a
read of it runs (a pread, a mapped gather, an O_DIRECT or io_uring batch, on any
thread) and *idle* otherwise; past ``max_idle`` idle files the least recently
used are closed. A pinned file is never closed: no read goes through a descriptor
number the kernel may have handed to another open since. So the descriptors held
are at most (files read at this moment + ``max_idle``), two each when mapped.

Closing a mapped file is safe because no array the reader hands out views its
map: every read copies out of the map before it unpins (``RangeReader._fetch``).
"""

from __future__ import annotations

import errno
import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable

from headrace.errors import ObjectNotFoundError, StorageError
from headrace.io._file import LocalFile

__all__ = [
    "MAX_IDLE_FILES",
    "OpenFiles",
    "check_same_file",
    "default_max_idle",
    "gone_error",
    "hold_files",
    "idle_share",
    "release_files",
]

#: Local files a reader (or a token source) keeps open while nothing reads them, for
#: the next read of the same file (an open on a network mount can cost 100 ms). Past
#: this the least recently used are closed: 700 token shards under ``ulimit -n 1024``
#: ran out of descriptors (EMFILE) when every file stayed open.
MAX_IDLE_FILES = 64


def default_max_idle() -> int:
    """A reader's idle files by default: a quarter of the process's descriptor limit
    (``ulimit -n``; 65,536 if unlimited), so that mapped ones (two descriptors each)
    take at most half of it: 256 under the common 1,024, 64 under 256.

    Not :data:`MAX_IDLE_FILES` for every limit: a row dataset reads a batch's rows
    from as many files as it has rows, in random order, so past the bound nearly
    every read reopens its file. That cost 37 us more per 32-row mapped read of
    page-cached files (75.1 against 38.4 us, 300 files against 64 idle;
    benchmarks/open_files_ab.py), and an open on a network mount can cost 100 ms:
    where the limit allows, keep them open.
    """
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError, ValueError):  # pragma: no cover - not Unix
        return MAX_IDLE_FILES
    if soft == resource.RLIM_INFINITY or soft <= 0:
        soft = 1 << 16
    return max(1, min(soft, 1 << 16) // 4)


# Everything in this process that keeps idle files open (readers, token sources, the
# tables' Parquet readers): the default bound is shared among them. Each had the whole
# of it: a mixture of four token datasets of 40 shards each under ``ulimit -n 128``
# kept 4 x 40 mapped files (two descriptors each) and failed with EMFILE at step 255.
_HOLDERS: weakref.WeakSet[object] = weakref.WeakSet()
_HOLDERS_LOCK = threading.Lock()


def _after_fork_in_child() -> None:
    global _HOLDERS_LOCK
    _HOLDERS_LOCK = threading.Lock()  # a parent's thread may have held it at the fork


os.register_at_fork(after_in_child=_after_fork_in_child)


def hold_files(holder: object) -> None:
    """Count ``holder`` among those sharing :func:`idle_share` (until released or gone)."""
    with _HOLDERS_LOCK:
        _HOLDERS.add(holder)


def release_files(holder: object) -> None:
    """``holder`` keeps no idle files any more (closed)."""
    with _HOLDERS_LOCK:
        _HOLDERS.discard(holder)


def idle_share(budget: int | None = None, most: int | None = None) -> int:
    """Idle files one holder keeps: ``budget`` (default :func:`default_max_idle`, a
    quarter of the descriptor limit) divided among the holders in this process, at
    least 1, at most ``most``. Read at each check, so a holder's share shrinks as
    others open files and grows back as they close."""
    if budget is None:
        budget = default_max_idle()
    share = max(1, budget // max(1, len(_HOLDERS)))
    return share if most is None else min(most, share)


def gone_error(
    path: str, owner: str, did: str = "opened", noun: str = "file"
) -> ObjectNotFoundError:
    """``path``, which the ``owner`` opened (or listed: ``did``) before, is not there now.
    Said as such: the plain open error guessed a typo ("did you mean 'shards/s1.bin'?")
    for a shard deleted during a run (an object's, the store's bare 404)."""
    return ObjectNotFoundError(
        errno.ENOENT,
        f"{path}: no such {noun} now; the {owner} {did} it before, so it was deleted or "
        f"moved while the run was reading it. Put it back to go on, or open a new {owner} "
        f'over the {noun}s there now (docs/long-runs.md, "Data that changes under a running '
        'job")',
    )


def check_same_file(f: LocalFile, was: tuple[int, int], bound: str, owner: str) -> None:
    """Refuse ``f``, opened again after being closed (to keep ``bound`` open, by a close,
    or in a pickled copy), unless it is the file (``was``: device, inode) first opened
    under its path; closes it if not."""
    if f.identity == was:
        return
    now = f.identity
    f.close()
    raise StorageError(
        errno.ESTALE,
        f"{f.path}: the file was replaced since it was first opened (device {was[0]}, "
        f"inode {was[1]} then; device {now[0]}, inode {now[1]} now); the {owner} reads "
        f"the file it first opened, and had closed it since (to keep {bound} open, at "
        f"close(), or in a worker's copy), so it cannot read it again. Open a new {owner} "
        "to read the new file",
    )


class _Entry:
    __slots__ = ("file", "pins")

    def __init__(self, file: LocalFile) -> None:
        self.file = file
        self.pins = 0


class OpenFiles:
    """Open :class:`LocalFile` s by path: :meth:`pin` one to read it, :meth:`unpin` after.

    Safe from several threads. A path reopened after its file was closed must
    name the same file (device and inode) as its first open: a file renamed over
    it raises :class:`StorageError` (``ESTALE``), where a held descriptor would
    have read on in the old one. Size and mtime are not compared: a file that
    grows or is written in place reads the same through a held descriptor and a
    reopened one, so checking them would make a read's outcome depend on the bound.
    """

    def __init__(self, opener: Callable[[str], LocalFile], max_idle: int | None = None) -> None:
        self._opener = opener
        self._max_idle = max_idle
        # Read once: the share is taken of the limit when the files were first kept.
        self._budget = default_max_idle()
        self._lock = threading.Lock()
        self._busy: dict[str, _Entry] = {}
        self._idle: OrderedDict[str, _Entry] = OrderedDict()  # least recently used first
        self._identity: dict[str, tuple[int, int]] = {}  # of each path's first open
        self._closed = False
        #: files opened again after being closed for the bound
        self.reopened = 0

    def __len__(self) -> int:
        return len(self._busy) + len(self._idle)

    @property
    def max_idle(self) -> int:
        """Idle files kept at most: as given, or (``None``) this process's share
        (:func:`idle_share`) of a quarter of the descriptor limit."""
        if self._max_idle is not None:
            return self._max_idle
        return idle_share(self._budget)

    def pin(self, path: str) -> LocalFile:
        """The open file of ``path``, opened if needed; not closed until :meth:`unpin`."""
        with self._lock:
            e = self._take(path)
            if e is not None:
                return e.file
        # Opened outside the lock: an open on a slow mount must not hold up the reads
        # of files already open. Two threads opening one path keep the first; the
        # other's descriptor is closed.
        f = self._opener(path)
        try:
            with self._lock:
                e = self._take(path)  # raises if the reader was closed meanwhile
                if e is None:
                    self._check_same(path, f)
                    hold_files(self)
                    e = self._busy[path] = _Entry(f)
                    e.pins = 1
                    return f
        except BaseException:
            f.close()
            raise
        f.close()
        return e.file

    def _take(self, path: str) -> _Entry | None:
        """Pin ``path``'s entry if it is open (under the lock)."""
        if self._closed:
            raise StorageError(errno.EBADF, f"{path}: the reader is closed")
        e = self._busy.get(path)
        if e is None:
            e = self._idle.pop(path, None)
            if e is None:
                return None
            self._busy[path] = e
        e.pins += 1
        return e

    def _check_same(self, path: str, f: LocalFile) -> None:
        was = self._identity.get(path)
        if was is None:
            self._identity[path] = f.identity
            return
        check_same_file(f, was, f"at most {self.max_idle} idle files", "reader")
        self.reopened += 1

    def unpin(self, path: str) -> None:
        """End one :meth:`pin` of ``path``; past ``max_idle`` idle files, close the oldest."""
        closing: list[LocalFile] = []
        with self._lock:
            e = self._busy[path]
            e.pins -= 1
            if e.pins:
                return
            del self._busy[path]
            if self._closed:
                closing.append(e.file)
            else:
                self._idle[path] = e
                bound = self.max_idle
                while len(self._idle) > bound:
                    closing.append(self._idle.popitem(last=False)[1].file)
        # Out of both tables, so no thread can pin them again: closed outside the lock.
        for f in closing:
            f.close()

    def close(self) -> None:
        """Close the idle files now, each pinned one when its last read unpins it."""
        with self._lock:
            self._closed = True
            idle = [e.file for e in self._idle.values()]
            self._idle.clear()
        release_files(self)
        for f in idle:
            f.close()

    @property
    def closed(self) -> bool:
        return self._closed
