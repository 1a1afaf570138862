"""The local files of all token sources in a process, bounded together.

Each token source kept the file of every window it held open (two descriptors
when mapped: Python's mmap holds a duplicate), and its windows stayed until it
needed others. The idle files were shared out process-wide, but not the files
with a window, so a ``Mixture`` of 1,000 single-file sources held 2,000
descriptors once each had been read, and under ``ulimit -n 512`` failed with
EMFILE at step 15. Now every local file a token source holds, window or not, is
one entry of a process-wide least-recently-used list, and the list together
takes one holder's share of the descriptor budget
(:func:`~headrace.io._open_files.idle_share`). Past it, a source that opens a
file asks the owners of the least recently used ones to *shed* them: drop that
file's windows (reads drained, mapped pages released) and close it. A window
shed and needed again is mapped (or read) again from the same file: the same
bytes, only the reads are repeated.

An owner in the middle of a read, prefetch or close is never asked twice: the
shed takes its lock without waiting and skips it if held, so no batch loses a
window it is gathering from, and two sources opening files at once cannot wait
for each other. Its files stay open past the bound until the next open finds
it idle, as a reader's pinned files do.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections import OrderedDict
from itertools import islice
from typing import Protocol

from headrace.io._open_files import hold_files, idle_share, release_files

__all__ = ["FileBudget", "Shedder", "token_files"]

# Owners looked at past the excess in one make_room: those busy reading are skipped.
_SLACK = 32


class Shedder(Protocol):
    def shed(self, file: int) -> bool:
        """Close file ``file`` and drop its windows, unless busy now; True if closed."""
        ...


class FileBudget:
    """Local files held open by many owners, least recently used first."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lru: OrderedDict[tuple[int, int], weakref.ref[Shedder]] = OrderedDict()
        #: files closed for the bound at another owner's request
        self.shed = 0

    def __len__(self) -> int:
        return len(self._lru)

    @property
    def bound(self) -> int:
        """Files kept open at most, all owners together: one holder's share of a
        quarter of the descriptor limit."""
        return idle_share()

    def touch(self, owner: Shedder, file: int) -> None:
        """``owner`` holds ``file`` open and uses it now (most recently used)."""
        key = (id(owner), file)
        with self._lock:
            ref = self._lru.pop(key, None)
            if not self._lru:
                hold_files(self)
            # (An id outlives its object: a new owner at a collected one's address.)
            self._lru[key] = ref if ref is not None and ref() is owner else weakref.ref(owner)

    def forget(self, owner: Shedder, file: int) -> None:
        """``owner`` closed ``file``."""
        self._forget((id(owner), file))

    def make_room(self, owner: Shedder) -> None:
        """Ask the owners of the least recently used files, other than ``owner`` (which
        bounds its own idle files), to close them until the bound holds; skip the busy."""
        with self._lock:
            excess = len(self._lru) - self.bound
            if excess <= 0:
                return
            oldest = list(islice(self._lru.items(), excess + _SLACK))
        me = id(owner)
        for (who, file), ref in oldest:
            if excess <= 0:
                return
            if who == me:
                continue
            other = ref()
            if other is None:  # collected without close(): its files went with it
                self._forget((who, file))
                excess -= 1
            elif other.shed(file):
                self.shed += 1
                excess -= 1

    def _forget(self, key: tuple[int, int]) -> None:
        with self._lock:
            self._lru.pop(key, None)
            if not self._lru:
                release_files(self)

    def _after_fork_in_child(self) -> None:
        self._lock = threading.Lock()  # a parent's thread may have held it at the fork


_BUDGET = FileBudget()
os.register_at_fork(after_in_child=_BUDGET._after_fork_in_child)


def token_files() -> FileBudget:
    """The process's budget of token sources' local files."""
    return _BUDGET
