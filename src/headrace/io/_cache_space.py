"""How many more bytes a cache directory may take, counted for every process sharing it.

A cache fills until it holds ``max_bytes`` of disk space (whole filesystem
blocks: a 500-byte entry takes 4 KiB on ext4) or until its filesystem would have
less than :func:`reserve_bytes` free (5% of it, at least 1 GiB, so checkpoints
and logs on the same disk still fit). Every process on the machine writes to the
same directory, so the bytes are counted in one ledger file under an exclusive
``flock`` that all of them add to (:meth:`CacheSpace.reserve`), measured again
when it says full (at most once a minute) and hourly in any case. Where there is
no ledger (no ``max_bytes``, or one cannot be written) a process counts on its own.
"""

from __future__ import annotations

import fcntl
import os
import struct
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from headrace.io._cache_files import LEDGER, STALE_TMP_S, disk_bytes, measure

__all__ = ["RESERVE_BYTES", "RESERVE_FRACTION", "CacheSpace", "Reservation", "reserve_bytes"]

#: Writes stop while the cache's filesystem would have less than this free.
RESERVE_BYTES = 1 << 30
#: ... and at least this fraction of the filesystem's size.
RESERVE_FRACTION = 0.05

# magic, bytes, when they were measured (time.time), and that measure's number (an
# entry written across a measure is counted again: see CacheSpace)
_LEDGER_FORMAT = struct.Struct("<4sqdq")
_LEDGER_MAGIC = b"HRB2"  # HRB1 had no measure numbers: measured again when met
# A cache full by this process's count is counted again after this long.
_RECOUNT_S = 60.0


def _made(directory: str) -> str:
    """``directory``, or where it will be made: the nearest folder above it that exists
    (nothing is made for an entry that cannot fit), whose filesystem it will be on."""
    while not os.path.isdir(directory) and os.path.dirname(directory) != directory:
        directory = os.path.dirname(directory)
    return directory


def reserve_bytes(total: int) -> int:
    """Bytes a cache leaves free on a filesystem of ``total`` bytes."""
    return max(RESERVE_BYTES, int(total * RESERVE_FRACTION))


@dataclass(frozen=True, kw_only=True, slots=True)
class Reservation:
    """Bytes counted for one entry being written: ``size``, in the ledger (``shared``) or
    this process's count, whose last measure was number ``generation``."""

    size: int
    shared: bool
    generation: int


class CacheSpace:
    """The byte count of the cache in ``directory``, up to ``max_bytes`` (``None``: up to
    the filesystem's free space less :func:`reserve_bytes`). Thread-safe.

    Measuring the directory (a clear, a full count a minute old) counts the entries
    there, not those being written: a writer reserves its bytes, writes a temporary
    file, and :meth:`keep` renames it into place under the count's lock, adding its
    bytes again if the count was measured since it reserved them (the measure did not
    see the entry) and giving them back if another writer's copy was there first;
    :meth:`give_back` and :meth:`remove` take bytes off only where a measure has not
    already. Every change is made under the same lock as every measure, so the
    count stays exact however they interleave (a writer that dies counts more).
    """

    def __init__(self, directory: str, max_bytes: int | None) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self._lock = threading.Lock()  # the byte count (may wait on other processes)
        self._used: int | None = None  # bytes in the directory, counted on first write
        self._measured = 0.0  # when they were last counted (time.monotonic)
        self._generation = 0  # times _used was measured (or dropped to be measured)
        self._block: int | None = None  # the filesystem's allocation unit, once known
        # (free bytes, the reserve) when the filesystem's reserve last refused a write.
        self.short: tuple[int, int] | None = None

    def on_disk(self, size: int) -> int:
        """The disk space a file of ``size`` bytes takes: whole blocks of the
        filesystem, as :func:`~headrace.io._cache_files.disk_bytes` measures them."""
        if self._block is None:
            try:
                self._block = os.statvfs(_made(self.directory)).f_frsize or 1
            except OSError:
                return size  # the write will fail and say why
        return -(-size // self._block) * self._block

    def reserve(self, size: int) -> Reservation | None:
        """Count ``size`` bytes as used if they fit (then :meth:`keep` or
        :meth:`give_back` them); ``None`` if not."""
        fits = self.max_bytes is None or size <= self.max_bytes
        if fits:  # (cache_bytes=0: read what is there, add nothing)
            try:
                st = os.statvfs(_made(self.directory))
                free = st.f_bavail * st.f_frsize - size
                keep = reserve_bytes(st.f_blocks * st.f_frsize)
                fits = free >= keep
                if not fits:
                    self.short = (free + size, keep)
            except OSError:
                pass  # unreadable: the write will say what is wrong
        if not fits:
            return None
        # Not under the cache's stats lock: the ledger may wait for another process
        # measuring the directory, and this process's cache hits must not wait with it.
        with self._lock:
            shared = self._count_shared(size) if self.max_bytes is not None else None
            if shared is not None:
                ok, generation = shared
                return Reservation(size=size, shared=True, generation=generation) if ok else None
            if not self._count_here(size):
                return None
            return Reservation(size=size, shared=False, generation=self._generation)

    def keep(
        self, r: Reservation, move: Callable[[], bool], drop: Callable[[], None]
    ) -> bool | None:
        """Put a written entry in place with ``move`` (``False``: another writer's copy
        is there, ours was not put) under the count's lock, counting it exactly:
        ``move``'s answer, or ``None`` where a measure since the reservation let other
        writers fill the room it held (then ``drop`` removes it unseen). An
        ``OSError`` from either goes to the caller, who gives the bytes back."""
        with self._lock, self._count_of(r) as (changed, used, set_used):
            if changed and used is not None and not self._fits(used + r.size):
                drop()
                return None
            placed = move()
            # In place and missed by a measure: count it again. Not in place, and
            # still counted (no measure since): take it off.
            if used is not None and placed == changed:
                set_used(max(0, used + (r.size if placed else -r.size)))
            return placed

    def give_back(self, r: Reservation) -> None:
        """Take the bytes of a write that did not happen off the count (unless a
        measure since has)."""
        with self._lock, self._count_of(r) as (changed, used, set_used):
            if used is not None and not changed:
                set_used(max(0, used - r.size))

    def _fits(self, used: int) -> bool:
        return self.max_bytes is None or used <= self.max_bytes

    def remove(self, path: str, identity: tuple[int, int]) -> OSError | None:
        """Remove an entry (a damaged one, ``(st_dev, st_ino)`` as it was read) and take
        its disk space off the count; why it could not be (``None``: removed, or gone
        already: another reader may have removed it and written the good bytes since,
        which stay)."""
        with self._lock:
            shared = self.max_bytes is not None
            with self._ledger(create=False) if shared else _no_ledger() as fd:
                try:
                    st = os.lstat(path)
                    if (st.st_dev, st.st_ino) != identity:
                        return None
                    os.unlink(path)
                except FileNotFoundError:  # another reader found it bad, or a clear
                    return None
                except OSError as exc:
                    return exc
                size = disk_bytes(st)
                if fd is not None:
                    used, measured, generation = _read_ledger(fd)
                    if used is not None:
                        _write_ledger(fd, max(0, used - size), measured, generation)
                if self._used is not None:
                    self._used = max(0, self._used - size)
                return None

    @contextmanager
    def _count_of(self, r: Reservation) -> Iterator[tuple[bool, int | None, Callable[[int], None]]]:
        """``(measured since, bytes, set the bytes)`` of the count ``r`` was made in,
        under its lock; ``None`` bytes: none to change (the ledger removed with the
        cache, by `rm -r`; this process's count to be measured at its next write).
        Under ``self._lock``."""
        if not r.shared:

            def here(used: int) -> None:
                self._used = used

            yield self._generation != r.generation, self._used, here
            return
        with self._ledger(create=False) as fd:
            if fd is None:
                yield True, None, lambda _: None
                return
            used, measured, generation = _read_ledger(fd)

            def shared(used: int) -> None:
                _write_ledger(fd, used, measured, generation)

            yield generation != r.generation, used, shared

    def _count_here(self, size: int) -> bool:
        """This process's count of the directory: measured at its first write, then
        its own writes added (no ledger: ``max_bytes`` is None, or it cannot be
        written). Under ``self._lock``."""
        now = time.monotonic()
        if self._used is None or (
            # Full by our count: entries may have been pruned since (headrace cache
            # --prune-days, another process): count again, at most once a minute.
            self.max_bytes is not None
            and self._used + size > self.max_bytes
            and now - self._measured > _RECOUNT_S
        ):
            self._used, self._measured = measure(self.directory), now
            self._generation += 1
        if self.max_bytes is not None and self._used + size > self.max_bytes:
            return False
        self._used += size
        return True

    def _count_shared(self, size: int) -> tuple[bool, int] | None:
        """Add ``size`` to the directory's ledger if it stays within ``max_bytes``:
        whether it did, and the ledger's generation; ``None`` where there is no ledger
        to share.

        Every process on the machine (8 ranks x 2 workers) writes to the same
        directory; counting it once each and then only one's own writes let each fill
        ``max_bytes`` on its own. The ledger, a count of the entries' bytes under an
        exclusive ``flock``, is what all of them add to. It never counts less than is
        there (a writer that died counts more), and it is measured again, at most
        once a minute between all processes, when it says full. Under
        ``self._lock``."""
        assert self.max_bytes is not None
        with self._ledger(create=True) as fd:
            if fd is None:
                return None
            used, measured, generation = _read_ledger(fd)
            now = time.time()
            age = now - measured
            if (
                used is None
                # Measured "in the future": the clock has been set back since (NTP, a
                # VM restored), and the ages below would not come for as long.
                or age < 0
                or (used + size > self.max_bytes and age > _RECOUNT_S)
                # Hourly in any case: a writer killed since (a preempted job) left a
                # temporary that measuring removes, and drift is put right.
                or age > STALE_TMP_S
            ):
                used, measured = measure(self.directory), now
                generation = _next_generation(generation)
            fits = used + size <= self.max_bytes
            if not _write_ledger(fd, used + size if fits else used, measured, generation):
                return None
            return fits, generation

    def recount(self) -> None:
        """Count the directory again (after a prune): every process sees the room at once."""
        with self._lock:
            self._used = None  # counted again before the next write
            self._generation += 1
            with self._ledger(create=False) as fd:
                if fd is not None:
                    _, _, generation = _read_ledger(fd)
                    used = measure(self.directory)
                    _write_ledger(fd, used, time.time(), _next_generation(generation))

    @contextmanager
    def _ledger(self, create: bool) -> Iterator[int | None]:
        """The ledger's descriptor, locked (``None`` where it cannot be had: a
        read-only directory, a filesystem without locks)."""
        path = os.path.join(self.directory, LEDGER)
        try:
            if create:
                os.makedirs(self.directory, exist_ok=True)
            fd = os.open(path, os.O_RDWR | (os.O_CREAT if create else 0) | os.O_CLOEXEC, 0o644)
        except OSError:
            yield None
            return
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except OSError:
                yield None
                return
            yield fd
        finally:
            os.close(fd)  # releases the lock


@contextmanager
def _no_ledger() -> Iterator[None]:
    yield None


def _next_generation(generation: int) -> int:
    """The number of the next measure: the clock's nanoseconds, so that a ledger made
    again (the cache removed by `rm -r`) never repeats an earlier one's numbers, which
    a write under way across it still holds."""
    return max(generation + 1, time.time_ns())


def _read_ledger(fd: int) -> tuple[int | None, float, int]:
    """``(bytes, when measured, the measure's number)`` of a locked ledger; ``None``
    bytes: new or unreadable."""
    try:
        raw = os.pread(fd, _LEDGER_FORMAT.size, 0)
    except OSError:
        return None, 0.0, 0
    if len(raw) != _LEDGER_FORMAT.size:
        return None, 0.0, 0
    magic, used, measured, generation = _LEDGER_FORMAT.unpack(raw)
    if magic != _LEDGER_MAGIC or used < 0:
        return None, 0.0, 0
    return int(used), float(measured), int(generation)


def _write_ledger(fd: int, used: int, measured: float, generation: int) -> bool:
    try:
        raw = _LEDGER_FORMAT.pack(_LEDGER_MAGIC, used, measured, generation)
        return os.pwrite(fd, raw, 0) == _LEDGER_FORMAT.size
    except OSError:  # disk full, EIO: the caller counts on its own
        return False
