"""The cache directory's files: how entries are named and sealed, and what the directory holds.

An entry is ``<2 hex>/<38 hex>`` under the directory, written to a temporary
name beside it (``<38 hex>.tmp-<pid>-<8 hex>``) and renamed into place, and ends
with :data:`TRAILER` (a magic, the CRC-32 of its bytes and their length). Its
writer holds an ``flock`` on the temporary (:func:`hold`) until the rename, which
the kernel drops when the writer dies (SIGKILL, SIGTERM, preemption): a temporary
whose lock can be taken is a dead writer's, and :func:`remove_dead` removes it.
Nothing else in the directory is the cache's to count or remove: a cache_dir
given by mistake (a project, a dataset, a git object store, which has the same
2/38 hex layout: hence :func:`is_entry`'s trailer check before a removal) keeps
its files. :func:`scan` walks the directory as it is now; :func:`measure` sizes
its entries as ``max_bytes`` counts them; :func:`remove_unused` prunes.
"""

from __future__ import annotations

import fcntl
import os
import re
import stat
import struct
import time
import zlib
from collections.abc import Iterator

__all__ = [
    "DEAD_TMP_S",
    "LEDGER",
    "MAGIC",
    "MAGIC_V1",
    "NOATIME",
    "STALE_TMP_S",
    "TMP",
    "TRAILER",
    "disk_bytes",
    "is_entry",
    "hold",
    "measure",
    "name_seed",
    "remove_dead",
    "remove_unused",
    "scan",
    "unlink",
]

TMP = ".tmp-"
# The bytes every process has written, under flock (headrace.io._cache_space).
LEDGER = ".headrace-bytes"
_SUBDIR = re.compile(r"[0-9a-f]{2}")
_ENTRY = re.compile(r"[0-9a-f]{38}")
_TEMP = re.compile(r"[0-9a-f]{38}\.tmp-[0-9]+-[0-9a-f]{8}")
# Every entry ends with this: a magic, the CRC-32 of its bytes, and their length. A read
# checks all three (zlib's CRC runs at ~3.7 GB/s here, without the GIL: ~80 us for a
# 300 KB JPEG), so a disk that lost or changed a write is never served as the object.
# The CRC starts from the entry's name (:func:`name_seed`): an intact entry found under
# another's name (a misdirected write, a restore gone wrong) fails it too.
TRAILER = struct.Struct("<4sIQ")
MAGIC = b"HRC2"
# Entries of headrace before the CRC covered the name: read as damaged, pruned as ours.
MAGIC_V1 = b"HRC1"
# A temporary file this old whose lock cannot be tried (a filesystem without flock,
# another user's temporary) is a writer's that died: removed when the cache is sized.
STALE_TMP_S = 3600.0
# A temporary whose lock is free is a dead writer's once it is this old: younger, its
# writer may be between creating it and locking it.
DEAD_TMP_S = 10.0
# Reads that leave a file's access time, by which a prune tells it unused (Linux).
NOATIME = getattr(os, "O_NOATIME", 0)


def hold(fd: int) -> int | None:
    """Lock a temporary its writer has just created, until it is renamed into place or
    the writer dies (the kernel closes its descriptors): a descriptor of it that holds
    the lock, to close after the rename. ``fd`` itself is closed before the rename (a
    write error may only be told at close), which its copy's lock outlives. ``None``
    on a filesystem without locks: the temporary is then removed an hour on."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return os.dup(fd)
    except OSError:
        return None


def _dead(path: str, st: os.stat_result, now: float) -> bool:
    """Whether the temporary ``path`` is a writer's that died: its lock is free (held, its
    writer lives, however long it takes); where no lock can be tried (another user's
    file, a filesystem without locks), once it is an hour old."""
    age = now - st.st_mtime
    # Written "in the future" by less than DEAD_TMP_S: made after this sweep took the time,
    # its writer perhaps yet to lock it (it was removed, its rename failed). Further
    # ahead, the clock has been set back since: its lock says.
    if -DEAD_TMP_S < age < DEAD_TMP_S:
        return False
    try:  # for writing: NFS makes flock a POSIX lock, whose exclusive kind needs it
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:  # renamed into place meanwhile
        return False
    except OSError:
        return age > STALE_TMP_S
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:  # held: its writer lives (or a child it forked mid-write)
        return False
    except OSError:
        return age > STALE_TMP_S
    finally:
        os.close(fd)
    return True


def remove_dead(directory: str) -> int:
    """Remove the temporaries of writers that died (killed mid-write): how many. Only the
    temporaries are looked at (no stat of an entry): one listing of the directory."""
    removed = 0
    now = time.time()
    try:
        top = [d.path for d in os.scandir(directory) if _SUBDIR.fullmatch(d.name)]
    except OSError:
        return 0
    for sub in top:
        try:
            names = [e for e in os.scandir(sub) if _TEMP.fullmatch(e.name)]
        except OSError:
            continue
        for e in names:
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode) and _dead(e.path, st, now):
                removed += unlink(e.path)
    return removed


def scan(directory: str) -> Iterator[tuple[str, os.stat_result | None, str]]:
    """``(path, stat, kind)`` of every file in ``directory``, as it is now: kind
    ``"entry"``, ``"tmp"`` (a writer's temporary), or ``"other"`` (not the cache's:
    not descended into, no stat)."""
    try:
        top = list(os.scandir(directory))
    except OSError:  # none yet, or unreadable (writing will fail and say so)
        return
    for sub in top:
        if sub.name == LEDGER:
            continue
        try:
            ours = _SUBDIR.fullmatch(sub.name) and sub.is_dir(follow_symlinks=False)
        except OSError:
            ours = False
        if not ours:
            yield sub.path, None, "other"
            continue
        try:
            files = list(os.scandir(sub.path))
        except OSError:
            continue
        for e in files:
            name = e.name
            kind = "entry" if _ENTRY.fullmatch(name) else "tmp" if _TEMP.fullmatch(name) else ""
            if not kind:
                yield e.path, None, "other"
                continue
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue  # removed meanwhile
            if not stat.S_ISREG(st.st_mode):
                yield e.path, None, "other"
                continue
            yield e.path, st, kind


def measure(directory: str) -> int:
    """Bytes of the entries in ``directory`` now (every process's); a dead writer's
    temporary files are removed."""
    total = 0
    now = time.time()
    for path, st, kind in scan(directory):
        if st is None:
            continue
        if kind == "entry":
            total += disk_bytes(st)
        elif _dead(path, st, now):
            unlink(path)
    return total


def remove_unused(
    directory: str, unused_s: float
) -> tuple[int, int, int, tuple[str, OSError] | None]:
    """Remove the entries not read or written for ``unused_s`` seconds and dead writers'
    temporaries: ``(removed, bytes freed, not removable, the first failure)``. A folder
    left empty by them goes too (until 2026-12-07 a clear left all 256); one that holds
    anything else stays, and so does one nothing was removed from (a user's, say)."""
    now = time.time()
    removed = freed = failed = 0
    first: tuple[str, OSError] | None = None
    emptied: set[str] = set()
    for path, st, kind in scan(directory):
        if st is None:
            continue
        if kind == "tmp":
            if _dead(path, st, now) and unlink(path):
                emptied.add(os.path.dirname(path))
            continue
        # 0 (a clear): every entry, those whose times are ahead of the clock too (an NFS
        # server's clock ahead of this machine's, a clock set back since), which were kept.
        used = max(st.st_atime, st.st_mtime)
        if (unused_s > 0 and now - used < unused_s) or not is_entry(path, st.st_size):
            continue
        try:
            os.unlink(path)
        except FileNotFoundError:  # another prune, or a reader that found it bad
            continue
        except OSError as exc:  # read-only, another user's: the caller must hear
            failed += 1
            first = first or (path, exc)
            continue
        removed += 1
        freed += disk_bytes(st)
        emptied.add(os.path.dirname(path))
    for folder in emptied:
        try:
            os.rmdir(folder)  # (only if empty: a writer's temporary since keeps it)
        except OSError:
            pass
    return removed, freed, failed, first


def disk_bytes(st: os.stat_result) -> int:
    """The disk space a file takes, as ``max_bytes`` counts it: its allocated blocks,
    or its size where that is more (a compressing filesystem, or one that reports no
    blocks, such as some FUSE mounts, is then not taken for free space)."""
    return max(st.st_blocks * 512, st.st_size)


def is_entry(path: str, size: int, touch: bool = True) -> bool:
    """Whether the file ends in an entry's trailer for its size (read before a file
    named like an entry is removed: a git object store has the same names). Read
    without marking it used (``O_NOATIME``: a summary before a prune had marked every
    entry used); ``touch=False``: where that is not allowed (another user's file), not
    read, and taken to be an entry."""
    if size < TRAILER.size:
        return size == 0  # a crash's empty entry (written, never flushed): ours too
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | NOATIME)
    except PermissionError:  # O_NOATIME: the file's owner only
        if not touch:
            return True
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return False
    except OSError:
        return False
    try:
        tail = os.pread(fd, TRAILER.size, size - TRAILER.size)
    except OSError:
        return False
    finally:
        os.close(fd)
    if len(tail) != TRAILER.size:
        return False
    magic, _, length = TRAILER.unpack(tail)
    return bool(magic in (MAGIC, MAGIC_V1) and length == size - TRAILER.size)


def name_seed(path: str) -> int:
    """Where an entry's CRC starts: the CRC-32 of its name (``ab/cdef...``, the hash of
    its object's URL, size, ETag and range)."""
    head, name = os.path.split(path)
    return zlib.crc32(f"{os.path.basename(head)}/{name}".encode())


def unlink(path: str) -> bool:
    try:
        os.unlink(path)
    except OSError:
        return False
    return True
