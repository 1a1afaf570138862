"""Whole windows of row files: the reads behind the windowed shuffle of rows.

Under ``shuffle="window"`` the rows are cut into blocks of ``window_rows``
consecutive rows, and :class:`~headrace.formats._row_plan.RowWindows` visits
the blocks (windows) in a permuted order and each block's rows in a permuted
order. A batch's rows therefore lie in one window (two at a boundary).
Instead of one scattered read per row, the first batch that touches a window
reads the window's whole byte range of every file (tokens, masks) through the
source's :class:`~headrace.io.RangeReader`, with its strategy: the rows are
contiguous, so the engine coalesces them into 4 MiB spans read in parallel.
Batches then gather their rows from the window's buffers.

The loader's ``prefetch(seed, samples)`` (the next chunk's samples) starts
the reads of that chunk's windows and, once the plan is within half a window
of the next window, that window's, on the shared I/O pool; it never evicts a
window the current or next chunk uses.

Memory: at most ``MAX_WINDOWS`` (2) windows' buffers, ``window_rows`` rows of
every file each. A positional read also fills a scratch buffer of its own
size (the engine's span buffer, freed once copied), so while both windows'
reads are in flight the peak is four windows' bytes; mapped reads need none.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import Future, wait
from typing import Any, cast

import numpy as np
from numpy.typing import NDArray

from headrace.errors import ConfigError
from headrace.formats._row_file import RowFile, RowReader
from headrace.formats._row_plan import RowWindows, ShuffleMode, check_window_rows, parse_shuffle
from headrace.io import io_pool

__all__ = [
    "MAX_WINDOWS",
    "WINDOW_BYTES",
    "RowWindowReader",
    "default_window_rows",
    "row_windows",
]

# A window large enough that one read of it costs a few round trips spread over
# hundreds of batches (16 MiB is four 4 MiB spans, read in parallel), small
# enough that two of them (plus the engine's scratch) stay tens of MiB and an
# epoch has many windows to shuffle. See docs/rows.md.
WINDOW_BYTES = 16 << 20
MAX_WINDOWS = 2

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
    if window_rows is None:
        if mode != "window":
            return mode, None
        row_bytes = sum(f.stride for f in dict.fromkeys(files))
        window_rows = default_window_rows(files[0].rows, row_bytes)
    check_window_rows(window_rows, "about 16 MiB of rows")
    if mode != "window":
        raise ConfigError(
            f"window_rows={window_rows!r} applies only to shuffle='window' (got shuffle="
            f"{shuffle!r}); drop window_rows or pass shuffle='window'."
        )
    return mode, RowWindowReader(io, files, cast(int, window_rows))


class _Window:
    __slots__ = ("ahead", "arrays", "futures")

    def __init__(
        self, arrays: dict[RowFile, NDArray[Any]], futures: list[Future[Any]], ahead: bool
    ) -> None:
        self.arrays = arrays  # file -> (rows of the window, width), the file's dtype
        self.futures = futures
        self.ahead = ahead  # started by prefetch: a failure is retried on demand


class RowWindowReader:
    """Rows of several same-length row files, served from whole windows held in memory.

    Not thread-safe: the caller serialises ``read`` and ``prefetch`` (the
    loader holds the source's lock); only the window reads run on the pool.
    """

    def __init__(self, io: RowReader, files: Sequence[RowFile], window_rows: int) -> None:
        self.io = io
        self.files = list(dict.fromkeys(files))  # a file named twice is read once
        n = self.files[0].rows
        self.window_rows = window_rows
        blocks = [window_rows] * (n // window_rows) + ([n % window_rows] if n % window_rows else [])
        self.windows = RowWindows(blocks, window_rows)
        self.windows_read = 0  # window reads started (a retried one counts twice)
        self._held: OrderedDict[int, _Window] = OrderedDict()
        self._current: set[int] = set()  # the windows of the last read

    def rows(self, seed: int, samples: NDArray[np.int64]) -> NDArray[np.int64]:
        return self.windows.rows(seed, samples)

    # -- reading -------------------------------------------------------------
    def read(self, rows: NDArray[np.int64], jobs: Sequence[_Job]) -> list[NDArray[Any]]:
        """Rows ``rows`` of each job's file (first ``cols`` columns; into ``out`` when given).

        The windows the rows lie in are read whole first unless held. Each
        window is gathered from before the next is read, so a call may span
        more windows than are held at once.
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
            arrays = self._ready(w)
            at = start if idx is None else start[idx]
            for (f, cols, _), out in zip(jobs, outs, strict=True):
                src = arrays[f] if cols is None else arrays[f][:, :cols]
                if idx is None:
                    # mode="clip" gathers straight into out (indices are in range).
                    np.take(src, at, axis=0, out=out, mode="clip")
                else:
                    out[idx] = src[at]
        self._current = {w for w, _ in groups}
        return outs

    def prefetch(self, seed: int, samples: NDArray[np.int64]) -> None:
        """Start reading the windows of the next chunk, and the window after, without waiting.

        The next window is requested once the plan is within half a window
        of it. A window is evicted for this only if neither the last read
        nor these samples use it.
        """
        samples = np.asarray(samples, dtype=np.int64)
        if not samples.size:
            return
        upcoming = np.unique(self.rows(seed, samples) // self.window_rows).tolist()
        keep = self._current | set(upcoming)
        ahead = np.array([int(samples.max()) + max(1, self.window_rows // 2)], dtype=np.int64)
        after = int(self.rows(seed, ahead)[0]) // self.window_rows
        for w in [*upcoming, after]:
            if w in self._held:
                continue
            if len(self._held) >= MAX_WINDOWS:
                oldest = next(iter(self._held))
                if oldest in keep:
                    continue
                self._evict(oldest)
            self._start(w, ahead=True)

    def _ready(self, w: int) -> dict[RowFile, NDArray[Any]]:
        """Window ``w``'s arrays, read first if needed; every read finishes before an error."""
        window = self._held.get(w)
        if window is None:
            while len(self._held) >= MAX_WINDOWS:
                self._evict(next(iter(self._held)))
            window = self._start(w, ahead=False)
        self._held.move_to_end(w)
        wait(window.futures)
        errors = [e for e in (fut.exception() for fut in window.futures) if e is not None]
        if errors:
            del self._held[w]
            if window.ahead:  # a failed read-ahead is retried on demand
                return self._ready(w)
            if len(errors) > 1:
                errors[0].add_note(f"{len(errors) - 1} other file(s) of the window also failed")
            raise errors[0]
        window.futures = []
        return window.arrays

    def _start(self, w: int, *, ahead: bool) -> _Window:
        first = w * self.window_rows
        count = min(self.window_rows, self.files[0].rows - first)
        rows = np.arange(first, first + count, dtype=np.int64)
        arrays = {f: np.empty((count, f.width), dtype=f.dtype) for f in self.files}
        # One request set per file: the engine coalesces the contiguous rows into
        # spans (at most max_span each) and reads them with its strategy.
        futures = [io_pool().submit(self.io.read, f, rows, None, out=a) for f, a in arrays.items()]
        window = self._held[w] = _Window(arrays, futures, ahead)
        self.windows_read += 1
        return window

    def _evict(self, w: int) -> None:
        # Its reads finish first: nothing may still write into memory we let go.
        wait(self._held.pop(w).futures)

    def close(self) -> None:
        for window in self._held.values():
            wait(window.futures)
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
