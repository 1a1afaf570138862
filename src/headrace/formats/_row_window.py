"""Whole windows of row files: the reads behind the windowed shuffle of rows.

Under ``shuffle="window"`` the rows are cut into blocks of ``window_rows``
consecutive rows, and :class:`~headrace.formats._row_plan.RowWindows` visits
the blocks (windows) in a permuted order and each block's rows in a permuted
order. A batch's rows therefore lie in one window (two at a boundary).
Instead of one scattered read per row, the first batch that touches a window
reads the window's whole byte range of every file (tokens, masks): one range
per file through the source's :class:`~headrace.io.RangeReader`, with its
strategy (positional reads split it into ``max_span`` pieces, 4 MiB by
default, read in parallel). Batches then gather their rows from the window's
buffers with one ``take`` per file. A window is kept in blocks of about
``BLOCK_BYTES`` of rows: a reader that is one host of a
``Loader(host_order="address")`` (told its share) reads only the blocks its
rows lie in, and reads ahead only its stretch of the next window.

The loader's ``prefetch(seed, samples)`` (the next chunk's samples) starts
the reads of that chunk's windows and, once the plan is within half a window
of the next window, that window's, on the shared I/O pool; it never evicts a
window the current or next chunk uses.

Memory: at most ``MAX_WINDOWS`` (2) windows' buffers, ``window_rows`` rows of
every file each (an evicted window's buffers are reused by the next). A
positional read also fills a scratch buffer of the window's size (the
engine's span buffer, freed once copied): the peak is four windows' bytes
while both windows are being read, 64 MiB at the default size; mapped reads
need no scratch.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from headrace._closing import Closing
from headrace._warn import warn_user
from headrace.errors import ConfigError
from headrace.formats._file_list import is_object_url
from headrace.formats._row_file import ReaderSpec, RowFile, RowReader
from headrace.formats._row_plan import (
    RowWindows,
    ShuffleMode,
    check_window_rows,
    parse_shuffle,
    sample_rows,
)
from headrace.io import CacheStats, io_pool, open_cache
from headrace.io._batch import raise_first
from headrace.io._waits import wait_done

if TYPE_CHECKING:
    from headrace.io import ObjectStats

__all__ = [
    "BLOCK_BYTES",
    "MAX_WINDOWS",
    "WINDOW_BYTES",
    "RowSource",
    "RowWindowReader",
    "default_window_rows",
    "row_windows",
]

# Large enough that a window read is a few parallel 4 MiB spans (a few round
# trips on slow storage) serving hundreds of batches of KiB-sized rows; small
# enough that two windows and the engine's scratch stay at tens of MiB and an
# epoch still has many windows to shuffle (a 300 GB dataset has ~18,000). See
# docs/rows.md.
WINDOW_BYTES = 16 << 20
MAX_WINDOWS = 2
# A window is read in blocks of about this many bytes (of all its files' rows): a
# reader told its share of each window reads the blocks of that share.
BLOCK_BYTES = 1 << 20

_Job = tuple[RowFile, int | None, NDArray[Any] | None]


def default_window_rows(rows: int, row_bytes: int) -> int:
    """The rows of the fewest equal windows of at most ``WINDOW_BYTES`` (one row at least)."""
    cap = max(1, WINDOW_BYTES // max(1, row_bytes))
    windows = -(-rows // cap)
    return -(-rows // windows)


def row_windows(
    io: RowReader, files: list[RowFile], shuffle: object, window_rows: object
) -> tuple[ShuffleMode, RowWindowReader | None]:
    """The shuffle mode, and the window reader of ``files`` under ``shuffle="window"``."""
    mode = parse_shuffle(shuffle) or "full"
    remote = [f.path for f in files if is_object_url(f.path)]
    if mode == "full" and remote:
        warn_user(
            f"{remote[0]}: a full shuffle of row files on object storage reads every row with "
            "a GET of its own (one round trip per chunk of batches, each row a request); "
            "shuffle='window' reads a window of rows per GET (docs/rows.md)"
        )
    if window_rows is None:
        if mode != "window":
            return mode, None
        row_bytes = sum(f.stride for f in dict.fromkeys(files))
        window_rows = default_window_rows(files[0].rows, row_bytes)
    window_rows = check_window_rows(window_rows, "about 16 MiB of rows")
    if mode != "window":
        raise ConfigError(
            f"window_rows={window_rows!r} applies only to shuffle='window' (got shuffle="
            f"{shuffle!r}); drop window_rows or pass shuffle='window'."
        )
    return mode, RowWindowReader(io, files, window_rows)


_Memory = dict[RowFile, NDArray[np.uint8]]


class _Window:
    """One window's buffers and which of its blocks of ``block_rows`` rows are in."""

    __slots__ = ("arrays", "filled", "memory", "pending")

    def __init__(self, memory: _Memory, count: int, blocks: int) -> None:
        self.memory = memory  # file -> bytes for a full window, reused by the next one
        # file -> (rows of the window, width) in the file's dtype, at the front of memory
        self.arrays = {
            f: m[: count * f.stride].view(f.dtype).reshape(count, f.width)
            for f, m in memory.items()
        }
        self.filled = np.zeros(blocks, dtype=bool)
        # block -> (the reads of its run of blocks, one per file; started by read-ahead?)
        self.pending: dict[int, tuple[list[Future[Any]], bool]] = {}

    @property
    def futures(self) -> list[Future[Any]]:
        """Every read in flight or not yet settled."""
        return list({id(f): f for fs, _ in self.pending.values() for f in fs}.values())


class RowWindowReader:
    """Rows of several same-length row files, served from windows held in memory.

    A window is read in blocks of ``block_rows`` rows (about ``BLOCK_BYTES``
    of every file), consecutive missing blocks in one read per file. A
    reader of the whole plan fills a window whole the first time it is
    needed. Told its ``share`` of each window (a host of a
    ``Loader(host_order="address")``, through :meth:`prefetch`), it reads
    only the blocks its rows need, and reads ahead the next window's blocks
    of its share (and a margin) only, so ``H`` hosts read about the bytes of
    one pass rather than ``H`` passes.

    Not thread-safe: the caller serialises ``read`` and ``prefetch`` (the
    loader holds the source's lock); only the block reads run on the pool.
    """

    def __init__(self, io: RowReader, files: Sequence[RowFile], window_rows: int) -> None:
        self.io = io
        self.files = list(dict.fromkeys(files))  # a file named twice is read once
        n = self.files[0].rows
        self.window_rows = window_rows
        blocks = [window_rows] * (n // window_rows) + ([n % window_rows] if n % window_rows else [])
        self.windows = RowWindows(blocks, window_rows)
        row_bytes = sum(f.stride for f in self.files)
        self.block_rows = min(window_rows, max(1, BLOCK_BYTES // max(1, row_bytes)))
        self.windows_read = 0  # window fills started (a retried read-ahead counts again)
        self._held: OrderedDict[int, _Window] = OrderedDict()
        self._current: set[int] = set()  # the windows of the last read
        self._share: tuple[float, float] | None = None  # None: the whole plan

    def rows(self, seed: int, samples: NDArray[np.int64]) -> NDArray[np.int64]:
        return self.windows.rows(seed, samples)

    # -- reading -------------------------------------------------------------
    def read(self, rows: NDArray[np.int64], jobs: Sequence[_Job]) -> list[NDArray[Any]]:
        """Rows ``rows`` of each job's file (first ``cols`` columns; into ``out`` when given).

        The blocks of the windows the rows lie in are read first unless held.
        Each window is gathered from before the next is read, so a call may
        span more windows than are held at once.
        """
        wr = self.window_rows
        win = rows // wr
        start = rows - win * wr
        outs: list[NDArray[Any]] = [
            np.empty((len(rows), f.width if c is None else c), dtype=f.dtype) if o is None else o
            for f, c, o in jobs
        ]
        if len(win) and win[0] == win[-1] and (win == win[0]).all():
            groups: list[tuple[int, NDArray[np.intp] | None]] = [(int(win[0]), None)]
        else:
            uniq, first, inv = np.unique(win, return_index=True, return_inverse=True)
            groups = [(int(uniq[u]), np.flatnonzero(inv == u)) for u in np.argsort(first)]
        for w, idx in groups:
            at = start if idx is None else start[idx]
            arrays = self._ready(w, at)
            for (f, cols, _), out in zip(jobs, outs, strict=True):
                src = arrays[f] if cols is None else arrays[f][:, :cols]
                if idx is None:
                    # mode="clip" gathers straight into out (indices are in range).
                    np.take(src, at, axis=0, out=out, mode="clip")
                else:
                    out[idx] = src[at]
        self._current = {w for w, _ in groups}
        return outs

    def prefetch(
        self, seed: int, samples: NDArray[np.int64], share: tuple[float, float] | None = None
    ) -> None:
        """Start reading what the next chunk needs, and the window after, without waiting.

        The next window is requested once the plan is within half a window
        of it: whole, or with ``share`` (this reader's fraction of each
        window in row order) only that stretch and a margin. A window is
        evicted for this only if neither the last read nor these samples
        use it.
        """
        if share is not None:
            self._share = share
        samples = np.asarray(samples, dtype=np.int64)
        if not samples.size:
            return
        wr = self.window_rows
        layout = self.windows.layout  # window i of the layout is rows i*window_rows, ...
        if self._share is None:
            # Windows only, not rows: window_of skips the per-window row orders.
            needs: dict[int, NDArray[np.int64] | None] = dict.fromkeys(
                np.unique(layout.window_of(seed, samples)).tolist()
            )
        else:
            rows = self.windows.rows(seed, samples)
            win = rows // wr
            needs = {w: rows[win == w] - w * wr for w in np.unique(win).tolist()}
        keep = self._current | set(needs)
        ahead = np.array([int(samples.max()) + max(1, wr // 2)], dtype=np.int64)
        after = int(layout.window_of(seed, ahead)[0])
        if after not in needs:
            needs[after] = None if self._share is None else self._share_rows(after)
        for w, at in needs.items():
            window = self._held.get(w)
            if window is None:
                spare = None
                if len(self._held) >= MAX_WINDOWS:
                    oldest = next(iter(self._held))
                    if oldest in keep:
                        continue
                    spare = self._evict(oldest)
                window = self._open(w, spare)
            self._request(w, window, self._blocks(w, at), ahead=True)

    def _share_rows(self, w: int) -> NDArray[np.int64]:
        """The rows of window ``w`` in this reader's share, with 5% of the window a side
        (a host's share of each sorted batch wanders from batch to batch)."""
        assert self._share is not None
        count = self._count(w)
        lo = int(max(0.0, self._share[0] - 0.05) * count)
        hi = int(np.ceil(min(1.0, self._share[1] + 0.05) * count))
        return np.arange(lo, max(lo + 1, hi), dtype=np.int64)

    def _count(self, w: int) -> int:
        return min(self.window_rows, self.files[0].rows - w * self.window_rows)

    def _blocks(self, w: int, at: NDArray[np.int64] | None) -> NDArray[np.int64]:
        """The blocks of window ``w`` that rows ``at`` lie in (``None``: all of them)."""
        if at is None:
            return np.arange(-(-self._count(w) // self.block_rows), dtype=np.int64)
        return np.unique(at // self.block_rows)

    def _ready(self, w: int, at: NDArray[np.int64]) -> dict[RowFile, NDArray[Any]]:
        """Window ``w``'s arrays with the blocks of rows ``at`` in (the whole window for
        a reader of the whole plan); every read of them finishes before an error."""
        window = self._held.get(w)
        if window is None:
            spare = None
            while len(self._held) >= MAX_WINDOWS:
                spare = self._evict(next(iter(self._held)))
            window = self._open(w, spare)
        self._held.move_to_end(w)
        blocks = self._blocks(w, None if self._share is None else at)
        self._request(w, window, blocks, ahead=False)
        retried = self._settle(window, blocks)
        if retried:  # read-ahead that failed: read again, now, once
            self.windows_read += 1
            self._request(w, window, blocks, ahead=False)
            self._settle(window, blocks)
        return window.arrays

    def _settle(self, window: _Window, blocks: NDArray[np.int64]) -> bool:
        """Wait for ``blocks``; mark them filled. ``True`` if a failed read was a
        read-ahead (dropped, to be read again); a failed demand read raises."""
        wanted = [b for b in blocks.tolist() if not window.filled[b]]
        futures = {id(f): f for b in wanted for f in window.pending[b][0]}
        wait_done(list(futures.values()))
        errors: list[BaseException] = []
        retry = False
        for b in wanted:
            fs, ahead = window.pending.pop(b)
            bad = [e for e in (f.exception() for f in fs) if e is not None]
            if not bad:
                window.filled[b] = True
            elif ahead:
                retry = True
            else:
                errors += [e for e in bad if all(e is not x for x in errors)]
        raise_first(errors, "other read(s) of the window also failed")
        return retry

    def _open(self, w: int, spare: _Memory | None) -> _Window:
        """Hold window ``w`` (nothing read yet), in ``spare`` (an evicted window's memory)."""
        count = self._count(w)
        # Reused memory is already faulted in: a fresh buffer would cost a page
        # fault per 4 KiB on its first write, as much as the copy itself.
        most = min(self.window_rows, self.files[0].rows)  # window_rows may exceed the file
        memory = spare or {f: np.empty(most * f.stride, np.uint8) for f in self.files}
        window = self._held[w] = _Window(memory, count, -(-count // self.block_rows))
        self.windows_read += 1
        return window

    def _request(self, w: int, window: _Window, blocks: NDArray[np.int64], *, ahead: bool) -> None:
        """Start reading the blocks that are neither in nor in flight: one read per file
        for each run of consecutive ones."""
        todo = [b for b in blocks.tolist() if not window.filled[b] and b not in window.pending]
        if not todo:
            return
        first = w * self.window_rows
        br, count = self.block_rows, self._count(w)
        breaks = np.flatnonzero(np.diff(todo) != 1) + 1
        for run in np.split(np.asarray(todo), breaks):
            r0, r1 = int(run[0]) * br, min(count, (int(run[-1]) + 1) * br)
            # One range per file, read with the engine's strategy (split into spans of
            # at most max_span, read in parallel, for positional reads) and copied once;
            # at an object URL, ranged GETs of at most PIECE bytes, all in flight at once.
            futures = [
                io_pool().submit(
                    self.io.read_into,
                    f,
                    [(f.offset + (first + r0) * f.stride, (r1 - r0) * f.stride)],
                    [a[r0:r1]],
                )
                for f, a in window.arrays.items()
            ]
            for b in run.tolist():
                window.pending[b] = (futures, ahead)

    def _evict(self, w: int) -> _Memory:
        # Its reads finish first: nothing may still write into memory we hand on.
        window = self._held.pop(w)
        wait_done(window.futures)
        return window.memory

    def close(self) -> None:
        for window in self._held.values():
            wait_done(window.futures)
        self._held.clear()
        self._current = set()

    def __getstate__(self) -> dict[str, Any]:
        # Pickled copies (worker processes) read their own windows.
        state = dict(self.__dict__)
        state["_held"] = OrderedDict()
        state["_current"] = set()
        state["windows_read"] = 0
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)


class RowSource(Closing):
    """What row sources (padded rows, pairs) share: their files' reader and windowed shuffle."""

    _io: RowReader
    _windows: RowWindowReader | None
    shuffle: ShuffleMode

    @contextmanager
    def _opening(
        self,
        reader: ReaderSpec,
        store_options: Mapping[str, Any] | None,
        in_flight: int,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_bytes: int | None = None,
    ) -> Iterator[RowReader]:
        """The source's reader, made first so that its files open through its stores;
        closed if the source then fails to open (no store or thread is left behind)."""
        cache = open_cache(cache_dir, cache_bytes)
        self._io = RowReader(reader, store_options=store_options, in_flight=in_flight, cache=cache)
        try:
            yield self._io
        except BaseException:
            self._io.close()
            raise

    def _open_rows(self, files: list[RowFile], shuffle: object, window_rows: object) -> None:
        self.shuffle, self._windows = row_windows(self._io, files, shuffle, window_rows)

    @property
    def window_rows(self) -> int:
        """Rows (groups) per window of the windowed shuffle (0 for other shuffles)."""
        return 0 if self._windows is None else self._windows.window_rows

    def __len__(self) -> int:
        raise NotImplementedError

    @property
    def samples_per_epoch(self) -> int:
        """Samples in one epoch: every row once (as for token and file sources)."""
        return len(self)

    def rows_of(self, seed: int, samples: NDArray[np.int64]) -> NDArray[np.int64]:
        """The row each sample reads, before any empty-row replacement."""
        if self._windows is not None:
            return self._windows.rows(seed, samples)
        return sample_rows(seed, samples, len(self), self.shuffle == "full")

    def starts(
        self, seed: int, samples: NDArray[np.int64]
    ) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """Where each sample lies: (file 0, its row), before any replacement. What
        ``Loader(host_order="address")`` sorts each batch by, so that a host's rows
        of a window lie together and it reads only its share of the window."""
        rows = self.rows_of(seed, np.asarray(samples, dtype=np.int64))
        return np.zeros_like(rows), rows

    @property
    def object_stats(self) -> ObjectStats | None:
        """GETs, bytes and latencies of files at object URLs, opening them included
        (``None`` when every file is local)."""
        return self._io.object_stats

    @property
    def cache_stats(self) -> CacheStats | None:
        """What the range cache did in this process (``None`` without ``cache_dir``)."""
        return None if self._io.cache is None else self._io.cache.stats

    def prefetch(
        self, seed: int, samples: NDArray[np.int64], share: tuple[float, float] | None = None
    ) -> None:
        """Start reading the windows these samples (the loader's next chunk) need;
        ``share``: this host's fraction of each window (see :class:`RowWindowReader`)."""
        if self._windows is not None:
            self._windows.prefetch(seed, samples, share)

    def close(self) -> None:
        if self._windows is not None:
            self._windows.close()
        self._io.close()
