"""One lazily filled window of a token file, and the counters of its reads.

A window buffer is allocated, not read: a batch fills just the 4 MiB blocks its
samples (and their shifted labels) touch, and filled blocks stay while the
window is cached (see :mod:`headrace.formats._window_cache`, which chooses and
caches windows, and :mod:`headrace.formats._token_source`, which gathers from them).
"""

from __future__ import annotations

import errno
import mmap
import os
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, NoReturn

import numpy as np
from numpy.typing import NDArray

from headrace.errors import StorageError
from headrace.formats._object_files import RemoteFile
from headrace.formats._packed import RemoteSegments, SegmentedFile
from headrace.io import PAGE, LocalFile, deep_io_pool, io_pool, madvise
from headrace.io import _in_flight as in_flight
from headrace.io._batch import raise_first
from headrace.io._buffers import MADV_POPULATE_READ, ask_for, populate_failed
from headrace.io._file import gone_hint
from headrace.io._waits import wait_done

__all__ = ["TokenStats", "TokenWindow"]


@dataclass(slots=True)
class TokenStats:
    """Counters of the storage work a token source did.

    ``bytes_read``: bytes of the token files asked for: every filled block, and
    the pages a mapped window's batch read ahead of their blocks (counted against
    those blocks, so a block that fills counts its length once in all; its own
    read is counted when a later batch, or ``close``, finds it done).
    ``blocks_read``: blocks filled.
    ``files_reopened``: local files opened again after being closed (for the bounds
    on open files); ``files_shed``: of those closed, the ones another token source
    closed, with their windows, to keep the files of all within the process's bound.
    """

    bytes_read: int = 0
    blocks_read: int = 0
    windows_opened: int = 0
    samples: int = 0
    files_reopened: int = 0
    files_shed: int = 0


# A mapped window's batch waits for its samples' pages, not their whole blocks (see
# TokenWindow.ensure). False: wait for whole blocks, as releases before it did (kept for
# benchmarks/tokens_slowfs.py's A side).
_SAMPLE_FIRST = True
_PIECE = 256 << 10  # the most one sample-first populate reads (page aligned)

_NO_BLOCKS = np.zeros(0, dtype=np.intp)
# numpy's largest itemsize (a C int): a void row of 2 GiB is "invalid itemsize".
_MAX_ITEMSIZE = 2**31 - 1


class TokenWindow:
    """One lazily filled window of a token file.

    Two ways to fill a block, same bytes. *Mapped*: the window is a view of the
    file's memory map and filling a block is ``MADV_POPULATE_READ`` on it (the
    kernel reads what is not cached and maps it, GIL released), so a batch is
    one copy from the page cache. *Buffered*: the window is our own memory and
    a block is filled by ``os.preadv`` into it (two copies, but no mapping:
    for files that cannot be mapped, or kernels without populate), or, for an
    object URL, by a ranged GET on the source's request queue.
    """

    __slots__ = (
        "_bytes",
        "_rows",
        "block_bytes",
        "buf",
        "clip",
        "complete",
        "file",
        "filled",
        "mapped",
        "offset",
        "pending",
        "sampled",
    )

    @property
    def memory(self) -> NDArray[np.uint8]:
        base = self._bytes.base
        assert isinstance(base, np.ndarray)
        return base

    def __init__(
        self,
        file: LocalFile | RemoteFile | SegmentedFile | RemoteSegments,
        dtype: np.dtype[Any],
        offset: int,
        tokens: int,
        block_bytes: int,
        memory: NDArray[np.uint8] | None,
    ) -> None:
        self.file = file
        self.offset = offset  # in bytes, within the file
        self.mapped = memory is None
        if memory is None:
            assert isinstance(file, LocalFile)
            memory = np.frombuffer(file.mapped, dtype=np.uint8)
            self._bytes = memory[offset : offset + tokens * dtype.itemsize]
            if self._bytes.size < tokens * dtype.itemsize:
                # Cut short since its source opened it, before this map was made: the
                # slice is short, and populating the window would run past the map.
                _refuse_shrunk(file.path, memory.size, offset, offset + tokens * dtype.itemsize)
        else:
            # May hold a previous window's bytes: ``filled`` says what is ours.
            self._bytes = memory[: tokens * dtype.itemsize]
        self.buf: NDArray[Any] = self._bytes.view(dtype)
        self.block_bytes = block_bytes
        self.filled = np.zeros(-(-self._bytes.size // block_bytes), dtype=bool)
        self.complete = False  # every block filled: nothing left to compute or request
        # A file's tail sample (TokenSource(tail=True)) may be short: its row runs past the
        # window's end, which is the file's. Only then are sample ends clipped (a check,
        # not a pass over the starts, on the default path).
        self.clip = False
        self._rows: NDArray[Any] | None = None
        self.pending: dict[int, Future[None]] = {}
        # Bytes of each block counted when samples' pages were read ahead of it: its own
        # read then counts the rest, so a filled block counts its length once in all.
        self.sampled = np.zeros(self.filled.size, dtype=np.int64)

    def blocks(self, starts: NDArray[np.int64], length: int) -> NDArray[np.intp]:
        """Blocks that tokens ``[s, s + length)`` touch and are not filled yet."""
        if self.complete:
            return _NO_BLOCKS
        isz = self.buf.itemsize
        first = starts * isz // self.block_bytes
        last = ((starts + length) * isz - 1) // self.block_bytes
        if self.clip:
            np.minimum(last, self.filled.size - 1, out=last)
        if (first == last).all():
            need = np.zeros(self.filled.size, dtype=bool)
            need[first] = True
        else:  # a sample may span blocks: mark the whole run of each
            edges = np.zeros(self.filled.size + 1, dtype=np.int64)
            np.add.at(edges, first, 1)
            np.add.at(edges, last + 1, -1)
            need = np.cumsum(edges[:-1]) > 0
        return np.flatnonzero(need & ~self.filled)

    def request(self, blocks: NDArray[np.intp]) -> list[Future[None]]:
        """Start reading the blocks not yet filled or in flight; return their futures."""
        futures = []
        for b in blocks.tolist():
            fut = self.pending.get(b)
            if fut is None:
                fut = self.pending[b] = self._start(b)
            futures.append(fut)
        return futures

    def ensure(self, starts: NDArray[np.int64], length: int, stats: TokenStats) -> None:
        """Make tokens ``[s, s + length)`` of every start readable; all reads finish
        before an error is raised.

        A buffered window waits for every block the samples touch. A mapped one
        waits only for the samples' own pages, populated at once on the deep I/O
        pool, and starts the rest of each touched block behind them on the I/O
        pool: a populate of a 4 MiB block on a network mount is 32 READs of
        128 KiB, two or so at a time (0.37 s at 20 ms a READ, measured), a
        sample's pages one READ, so a first batch (a resume, a window the
        read-ahead did not cover) waits a round trip or two instead of whole
        blocks: 0.07 s against 1.16 s for a 256 MiB window at 20 ms. The deep
        pool, not the I/O pool: there the samples would queue behind blocks
        still being read for earlier batches or read ahead.
        """
        blocks = self.blocks(starts, length)
        if not blocks.size:
            return
        if not (self.mapped and _SAMPLE_FIRST):
            wait_done(self.request(blocks))
            self.settle(stats, blocks)
            return
        self.settle(stats, _NO_BLOCKS)  # blocks filled behind since the last batch
        ranges = self.sample_ranges(starts, length)
        if not ranges:
            return
        pool = deep_io_pool()
        futures = [pool.submit(self._populate, lo, hi) for lo, hi in ranges]
        self.request(self.blocks(starts, length))  # the rest of each block, behind
        wait_done(futures)
        errors = []
        for (lo, hi), f in zip(ranges, futures, strict=True):
            exc = f.exception()
            if exc is None:
                stats.bytes_read += self._count_sampled(lo, hi)
            else:
                errors.append(exc)
        raise_first(errors, "other sample reads also failed")

    def _count_sampled(self, lo: int, hi: int) -> int:
        """Count file bytes ``[lo, hi)`` against the blocks not filled yet; return how many
        (each block up to its length: pages read twice before it fills count twice)."""
        lo = max(lo - self.offset, 0)
        hi = min(hi - self.offset, self._bytes.size)
        added = 0
        for b in range(lo // self.block_bytes, (hi - 1) // self.block_bytes + 1):
            if self.filled[b]:
                continue
            start = b * self.block_bytes
            n = min(hi, start + self._block_len(b)) - max(lo, start)
            n = min(n, self._block_len(b) - int(self.sampled[b]))
            self.sampled[b] += n
            added += n
        return added

    def sample_ranges(self, starts: NDArray[np.int64], length: int) -> list[tuple[int, int]]:
        """File byte ranges, page aligned and merged, of the samples that touch a block
        not filled yet."""
        isz = self.buf.itemsize
        first = starts * isz // self.block_bytes
        last = ((starts + length) * isz - 1) // self.block_bytes
        if self.clip:  # a short tail sample (see __init__)
            np.minimum(last, self.filled.size - 1, out=last)
        unfilled = np.zeros(self.filled.size + 1, dtype=np.int64)
        np.cumsum(~self.filled, out=unfilled[1:])
        need = np.sort(starts[unfilled[last + 1] > unfilled[first]])
        if not need.size:
            return []
        lo = (self.offset + need * isz) // PAGE * PAGE
        hi = self.offset + (need + length) * isz
        if self.clip:  # past a short tail sample lies the end of the file
            np.minimum(hi, self.offset + self._bytes.size, out=hi)
        # Merge ranges that overlap or share a page: one populate, not several. (All
        # have one length, so ``hi`` is sorted too.)
        run = np.flatnonzero(lo[1:] > -(-hi[:-1] // PAGE) * PAGE) + 1
        firsts = np.concatenate(([0], run))
        out: list[tuple[int, int]] = []
        for a, b in zip(lo[firsts].tolist(), np.maximum.reduceat(hi, firsts).tolist(), strict=True):
            # A populate reads its range a READ or two at a time: cut long runs (long
            # samples, or many close together) into pieces that are read at once.
            out.extend((p, min(b, p + _PIECE)) for p in range(a, b, _PIECE))
        return out

    def settle(self, stats: TokenStats, blocks: NDArray[np.intp]) -> None:
        """Record finished reads; raise the first failure among ``blocks``."""
        errors: list[BaseException] = []
        wanted = set(blocks.tolist())
        for b, fut in list(self.pending.items()):
            if not fut.done():
                continue
            del self.pending[b]
            exc = (
                StorageError(errno.ECANCELED, f"{self.file.path}: block {b} read was cancelled")
                if fut.cancelled()
                else fut.exception()
            )
            if exc is None:
                self.filled[b] = True
                self.complete = bool(self.filled.all())
                stats.blocks_read += 1
                stats.bytes_read += self._block_len(b) - int(self.sampled[b])
            elif b in wanted:
                errors.append(exc)
            # A failed read-ahead nobody needs yet is dropped: it is retried on demand.
        raise_first(errors, "other block reads also failed")

    def drain(self, stats: TokenStats) -> None:
        """Wait for reads in flight, so the memory can be reused safely; count the
        blocks they filled (a mapped window's batches do not wait for them all).

        A local block not yet started is cancelled first: after a few batches of a
        mapped window on a slow mount, most of its blocks may still wait their turn
        (0.4 s each at 20 ms a READ), and nobody will read them now.
        """
        if not isinstance(self.file, (RemoteFile, RemoteSegments)):
            # The store's own futures are left alone: their GETs are cancelled by
            # closing the store, and a cancelled one must not be taken as finished.
            for fut in self.pending.values():
                fut.cancel()
        wait_done(list(self.pending.values()))
        self.settle(stats, _NO_BLOCKS)  # never raises: no block is wanted

    def _block_len(self, block: int) -> int:
        return min(self.block_bytes, self._bytes.size - block * self.block_bytes)

    def _start(self, block: int) -> Future[None]:
        if isinstance(self.file, (RemoteFile, RemoteSegments)):
            lo = block * self.block_bytes
            n = self._block_len(block)
            return self.file.read_into(self._bytes[lo : lo + n], self.offset + lo)
        return io_pool().submit(self._fill, block)

    def _fill(self, block: int) -> None:
        lo = block * self.block_bytes
        n = self._block_len(block)
        assert not isinstance(self.file, (RemoteFile, RemoteSegments))
        if not self.mapped:
            self.file.pread_into(self._bytes[lo : lo + n], self.offset + lo)
            return
        self._populate(self.offset + lo, self.offset + lo + n)

    def _populate(self, lo: int, hi: int) -> None:
        """Fault file bytes ``[lo, hi)`` of a mapped window in, reading what is not cached."""
        start = lo // PAGE * PAGE  # madvise wants a page-aligned start
        key = in_flight.begin(self.file.path, lo, hi)
        try:
            # Asked for first: the map is advised random (a fault reads its page only).
            ask_for(self.memory.ctypes.data + start, hi - start)
            madvise(self.memory, start, hi - start, MADV_POPULATE_READ)
        except OSError as exc:
            raise populate_failed(self.file.path, lo, hi, exc, self.check_size) from exc
        finally:
            in_flight.end(key)

    def check_size(self) -> None:
        """Refuse to touch a mapped window whose file shrank: the access would SIGBUS.

        (A race remains between this check and the copy; truncating training data
        under a running job is rare, and this turns the common case into an error.)
        """
        assert isinstance(self.file, LocalFile)
        try:
            now = os.fstat(self.file.fd).st_size
        except OSError as exc:  # a mount whose server was killed: ENOTCONN, no file named
            raise StorageError(
                exc.errno or errno.EIO,
                f"{self.file.path}: cannot stat ({exc.strerror or exc})"
                f"{gone_hint(exc, self.file.path)}",
            ) from exc
        end = self.offset + self._bytes.size
        if now < end:
            _refuse_shrunk(self.file.path, now, self.offset, end)

    def release(self) -> None:
        """Drop a mapped window's pages from this process (the page cache keeps them)."""
        if self.mapped and self._bytes.size:
            start = self.offset // PAGE * PAGE
            # The window's view keeps the map open, so this cannot fail on a closed map.
            madvise(self.memory, start, self.offset + self._bytes.size - start, mmap.MADV_DONTNEED)

    def rows(self, context: int, step: int) -> NDArray[Any]:
        """A cached view of ``S`` overlapping rows, row ``i`` = tokens ``[i*D, i*D + L + 1)``
        (``D``, the ``step`` between starts: ``L``, or a stride).

        Each row is one opaque item (a void dtype of ``(L + 1) * itemsize``
        bytes), so indexing copies a row with one ``memcpy`` instead of an
        element loop: 7% faster on random rows of 1,025 uint32 tokens
        (14.5 against 15.6 us per 32 rows). ``.view(dtype)`` of the gathered
        items gives the ``(n, L + 1)`` tokens. A row of 2 GiB or more (``L + 1 >=
        2**29`` uint32 tokens) is past numpy's itemsize (a C ``int``): there the view is
        ``(S, L + 1)`` tokens, whose rows are copied as fast (each is contiguous: 32
        random rows of 4 MiB, 14-17 ms either way).
        """
        if self._rows is None:
            isz = self.buf.itemsize
            n = max(0, (self.buf.size - 1 - context) // step + 1)
            whole = (context + 1) * isz <= _MAX_ITEMSIZE
            self._rows = np.ndarray(
                shape=(n,) if whole else (n, context + 1),
                dtype=np.dtype((np.void, (context + 1) * isz)) if whole else self.buf.dtype,
                buffer=self._bytes,
                strides=(step * isz,) if whole else (step * isz, isz),
            )
            self._rows.flags.writeable = False
        return self._rows


def _refuse_shrunk(path: str, now: int, start: int, end: int) -> NoReturn:
    """Refuse a window of bytes ``[start, end)`` of a file now ``now`` bytes long."""
    raise StorageError(
        errno.EIO,
        f"{path}: file shrank to {now} bytes while open; reading bytes [{start}, {end}) "
        "through the file map would fault",
    )
