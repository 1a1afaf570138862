"""Which windows a token source holds, which it reads ahead, and the files under them.

:class:`WindowCache` is the part of :class:`~headrace.formats.TokenSource`
that keeps up to ``max_windows`` windows (least recently used first out, but
never one the gather under way or the read ahead still wants), fills the next
window from half a window before the plan reaches it, and keeps the local
files under them open within the process's bound on the files of all token
sources (:mod:`headrace.formats._token_budget`); its state lives on the
source, which pickles it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from headrace._closing import Closing
from headrace.errors import ObjectNotFoundError
from headrace.formats._object_files import ObjectFiles, RemoteFile
from headrace.formats._packed import RemoteSegments, SegmentedFile
from headrace.formats._token_budget import token_files
from headrace.formats._token_window import TokenStats, TokenWindow
from headrace.formats._tokens import TokenFile, check_token_head
from headrace.io import PAGE, LocalFile, page_aligned_empty
from headrace.io._buffers import populate_file
from headrace.io._open_files import check_same_file, gone_error
from headrace.plan import WindowLayout, WindowPlan, group_by_window

__all__ = ["WindowCache"]


class WindowCache(Closing):
    """A token source's windows and files (a base of :class:`~headrace.formats.TokenSource`)."""

    # Set by TokenSource.__init__; see there.
    files: list[TokenFile]
    dtype: np.dtype[Any]
    context: int
    block_bytes: int
    layout: WindowLayout
    max_windows: int
    reads: str
    read_ahead: bool
    stats: TokenStats
    _lock: threading.RLock
    _populate_ok: bool | None
    _open: dict[int, LocalFile | RemoteFile | SegmentedFile | RemoteSegments]
    _identity: dict[int, tuple[int, int]]
    _windows: OrderedDict[int, TokenWindow]
    _free: list[NDArray[np.uint8]]
    _gathered: set[int]
    _ahead_checked: tuple[int, int] | None
    _ahead: int | None
    _todo: set[int]
    _window_nbytes: int

    if TYPE_CHECKING:

        def _remote(self) -> ObjectFiles: ...
        def _plan(self, seed: int, samples: NDArray[np.int64]) -> WindowPlan: ...
        def _max_idle(self) -> int: ...

    def _prefetch(self, seed: int, samples: NDArray[np.int64], share: tuple[float, float]) -> None:
        plan = self._plan(seed, samples)
        upcoming = set()
        for (_, w), idx in group_by_window(plan.epoch, plan.window):
            upcoming.add(w)
            if w not in self._windows and (
                len(self._windows) >= self.max_windows or self._crowded(w)
            ):
                continue
            win = self._window(w)
            win.request(win.blocks(plan.start[idx], self.context + 1))
        if self.read_ahead and samples.size and self.max_windows > 1:
            self._open_next_window(seed, int(samples.max()), upcoming | self._gathered, share)

    def _open_next_window(
        self, seed: int, last: int, keep: set[int], share: tuple[float, float] = (0.0, 1.0)
    ) -> None:
        """Fill the window that comes after this one while this one is still read.

        Every block of a window is read within its first few batches (the
        samples are spread over all of it), so the next window is requested
        whole once the plan is within half a window of it: on cold storage its
        reads (and on any storage, its page mapping) overlap this window's
        batches instead of stalling the first batch after the switch. Only a
        window that neither this chunk nor the next one uses is evicted for it.
        """
        half = max(1, self.layout.per_window // 2)
        ahead = last + half
        key = (seed, ahead // max(1, half // 4))  # look again every 1/8 of a window
        if key == self._ahead_checked:
            return
        self._ahead_checked = key
        # Only its window: the start order (a table built once a window) is not needed yet.
        w = int(self.layout.positions(seed, np.array([ahead], dtype=np.int64)).window[0])
        if w in self._windows or self._crowded(w):
            return
        if len(self._windows) >= self.max_windows and self._victim() in keep:
            return
        win = self._window(w)
        self._ahead = w
        if share == (0.0, 1.0):
            win.request(np.arange(win.filled.size))
            return
        # A host's share of sorted samples wanders with the batch: a margin of 5% a side.
        n = int(self.layout.window_count[w])
        first = int(max(0.0, share[0] - 0.05) * n)
        last_start = min(n, int(np.ceil(min(1.0, share[1] + 0.05) * n)))
        starts = np.arange(first, last_start, dtype=np.int64) * self.layout.step
        win.request(win.blocks(starts, self.context + 1))

    def _file(self, i: int) -> LocalFile | RemoteFile | SegmentedFile | RemoteSegments:
        f = self._open.pop(i, None)
        if f is not None:
            self._open[i] = f  # most recently used last
        else:
            self._close_idle(keep=i)
            tf = self.files[i]
            if tf.segments is not None and tf.remote:
                stores = self._remote()
                handles = [
                    stores.open(m, size, etag)
                    for m, (size, etag) in zip(tf.members, tf.member_infos, strict=True)
                ]
                f = RemoteSegments(tf.path, handles, tf.segments)
            elif tf.remote:
                first = (
                    partial(check_token_head, tf.path, tf.format, tf.nbytes)
                    if tf.check_head
                    else None
                )
                f = self._remote().open(tf.path, tf.nbytes, tf.etag, first)
            elif tf.segments is not None:
                f = SegmentedFile(tf.path, tf.members, tf.segments, tf.member_stamps)
            else:
                try:
                    opened = LocalFile(tf.path)
                except ObjectNotFoundError as exc:  # there when the source opened it
                    raise gone_error(tf.path, "token source") from exc
                f = self._same_file(i, opened)
            self._open[i] = f
            if not isinstance(f, (RemoteFile, RemoteSegments)):
                token_files().touch(self, i)
                token_files().make_room(self)
        return f

    def _same_file(self, i: int, f: LocalFile) -> LocalFile:
        """``f``, opened again, if it is the file first opened as file ``i``."""
        if i in self._identity:
            self.stats.files_reopened += 1
        was = self._identity.setdefault(i, self.files[i].identity or f.identity)
        check_same_file(f, was, f"at most {self._max_idle()} idle files", "token source")
        return f

    def _close_idle(self, keep: int) -> None:
        """Close the least recently used files without a window, down to :meth:`_max_idle`.

        A file with a window stays open: its reads may be in flight, and a mapped
        window views its map. An evicted window was drained (nothing in flight) and
        dropped (nothing views its map), so its file is idle.
        """
        busy = {int(self.layout.window_file[w]) for w in self._windows}
        busy.add(keep)
        idle = [i for i in self._open if i not in busy]
        for i in idle[: max(0, len(idle) - self._max_idle())]:
            self._close_file(i)

    def _close_file(self, i: int) -> None:
        f = self._open.pop(i)
        if not isinstance(f, (RemoteFile, RemoteSegments)):
            f.close()
            token_files().forget(self, i)

    def _held(self, i: int) -> bool:
        """Whether local file ``i`` is open (counted in :func:`token_files`)."""
        f = self._open.get(i)
        return f is not None and not isinstance(f, (RemoteFile, RemoteSegments))

    def shed(self, file: int) -> bool:
        """Close local file ``file`` and drop its windows, for the process's bound on the
        files of all token sources (asked by another source opening one); False, and
        nothing done, while this source is being read (see :mod:`._token_budget`).

        A window shed is opened again when a batch needs it: the same bytes, read or
        mapped again. Its reads in flight finish first, and nothing views its map (a
        batch is a copy), so its file can close.
        """
        if not self._lock.acquire(blocking=False):
            return False
        try:
            if not self._held(file):  # closed meanwhile
                token_files().forget(self, file)
                return True
            for w in [w for w in self._windows if int(self.layout.window_file[w]) == file]:
                win = self._windows.pop(w)
                win.drain(self.stats)
                win.release()  # a buffered window's memory goes too: S sources, S buffers
                # Its views of the map go now: a map still viewed stays open (and its
                # descriptor with it) when the file closes, until they are freed.
                del win
                if w == self._ahead:
                    self._ahead = None
            self._close_file(file)
            self.stats.files_shed += 1
            return True
        finally:
            self._lock.release()

    def _crowded(self, w: int) -> bool:
        """Whether opening window ``w``'s file would close another source's: the files of
        other token sources fill the process's bound. A read ahead then waits for the
        read, or a mixture whose chunk meets more sources than the bound opened each
        file twice a chunk: the prefetches of the chunk's later sources closed the
        earlier ones' before their reads."""
        fi = int(self.layout.window_file[w])
        if fi in self._open or self.files[fi].remote:
            return False
        budget = token_files()
        mine = sum(map(self._held, self._open))
        return len(budget) - mine >= budget.bound

    def _victim(self) -> int:
        """The window to evict: the least recently used, but not one still wanted.

        A window read ahead has not been used yet, so it is the least recently
        used one as soon as the current window is touched again, and a chunk
        that spans windows touches them in turn; evicting either would throw
        reads away (and wait for those in flight) only to read them again a
        moment later. That happened whenever a small window, like a file's last
        few samples, came between the current window and the one read ahead.
        Which window goes never changes a batch, only the reads.
        """
        for avoid in (self._todo | {self._ahead}, self._todo):
            for k in self._windows:
                if k not in avoid:
                    return k
        return next(iter(self._windows))

    def _window(self, w: int) -> TokenWindow:
        win = self._windows.get(w)
        if win is not None:
            self._windows.move_to_end(w)
            fi = int(self.layout.window_file[w])
            if self._held(fi):
                token_files().touch(self, fi)
            return win
        while len(self._windows) >= self.max_windows:
            # Recycle the evicted window's memory: its pages are already faulted in.
            old = self._windows.pop(self._victim())
            old.drain(self.stats)
            if old.mapped:
                # Here, not on the pool: released later, its pages stayed mapped beside
                # the two held windows (peak RSS 677-733 MiB against 573-577, measured
                # side by side, for no gain in batches/s).
                old.release()
            else:
                self._free.append(old.memory)
        fi = int(self.layout.window_file[w])
        base = int(self.layout.window_base[w])
        win = TokenWindow(
            self._file(fi),
            self.dtype,
            base * self.dtype.itemsize,
            self.layout.window_tokens_of(w),
            self.block_bytes,
            self._window_memory(fi),
        )
        win.clip = self.layout.tail
        self._windows[w] = win
        self.stats.windows_opened += 1
        return win

    def _window_memory(self, fi: int) -> NDArray[np.uint8] | None:
        """``None`` for a mapped window, else recycled or fresh window memory."""
        tf = self.files[fi]
        # Segments (an Arrow column's token lists) are not one run of the file: buffered.
        if self.reads == "populate" and not tf.remote and tf.segments is None:
            if self._can_populate(fi):
                return None
        return self._free.pop() if self._free else page_aligned_empty(self._window_nbytes)

    def _can_populate(self, fi: int) -> bool:
        if self._populate_ok is None:
            try:
                f = self._file(fi)
                assert isinstance(f, LocalFile)
                n = min(PAGE, f.size)
                # Not mmap.madvise, which holds the GIL: on a stalled mount every thread of
                # the process (a stall warning's too) waited for this page's READ.
                at = np.frombuffer(f.mapped, dtype=np.uint8).ctypes.data
                # (Its error's wording is not needed: any failure is a "no" below.)
                self._populate_ok = populate_file(at, n, f.path, 0, n, lambda: None)
            except (OSError, ValueError):  # old kernel, or a file that cannot be mapped
                self._populate_ok = False
        return self._populate_ok
