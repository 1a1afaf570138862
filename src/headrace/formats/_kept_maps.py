"""Maps of local files kept open between visits: one budget for the whole process.

A source reading NPY files by rows maps a local file whose rows are in memory (or an
object's whole entry in ``cache_dir``) and copies them from the page cache
(:class:`~headrace.formats._npy_ranges.RangedNpy`).
Opening, mapping and closing the file at every visit cost ~90 us of a visit's ~250
(16 files of 4 KB rows); here the maps used last stay open for the next visits: at
most ``KEPT_MAPS`` of them (two descriptors each: see ``LocalFile.mapped``; and no more
than this process's share of its descriptor limit, shared with the readers, token
sources and tables that keep files open: :func:`~headrace.io._open_files.idle_share`) and
``KEPT_MAP_BYTES`` of files (the pages a kept map has read count in the process's
RSS), for all the sources of the process together, so that a mixture of many
sources holds no more descriptors or pages than one. A larger file is mapped afresh
at each visit. A map is kept while the file at its path is the one it maps (an
``os.stat`` a visit): one renamed over or deleted since is opened again, and
refused as such; a cache entry's blocks that a visit reads are still checked, once a
process (``still_good``). A forked worker opens its own.
"""

from __future__ import annotations

import itertools
import math
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from headrace.io._open_files import hold_files, idle_share, release_files

if TYPE_CHECKING:
    from headrace.io._file import LocalFile

__all__ = ["KEPT", "KeptMap", "KeptMaps"]

KEPT_MAPS = 64
KEPT_MAP_BYTES = 256 << 20
#: A kept map whose whole file was found in memory is read through for this long
#: without asking ``mincore`` again (~60 us a 4 MiB file at every visit: 20% of an epoch
#: of 4 KB rows): pages evicted meanwhile are faulted in by the copy, slower, the same
#: bytes. A file found partly in memory (or larger than ``WHOLE_RESIDENT``, a ``mincore``
#: call costing ~50 ns a page) has the rows of each visit asked.
RESIDENT_FOR = 1.0
#: The largest file asked about whole; a file whose rows are not known when it is opened
#: (the decode asks them) is mapped only if all of it is in memory, up to this size.
WHOLE_RESIDENT = 16 << 20


@dataclass
class KeptMap:
    """A local file open and mapped, and what ``mincore`` said of it last."""

    file: LocalFile
    asked_at: float = -math.inf  # when the whole file was last asked about
    whole: bool = False  # whether it was all in memory then

    def in_memory(self, starts: NDArray[np.int64], ends: NDArray[np.int64]) -> bool:
        """Whether the pages of bytes ``[starts, ends)`` are in memory (a hint)."""
        now = time.monotonic()
        size = self.file.size
        if now - self.asked_at >= RESIDENT_FOR and size <= WHOLE_RESIDENT:
            self.whole = bool(self.file.resident(np.zeros(1, np.int64), np.full(1, size)).all())
            self.asked_at = now
        return self.whole or bool(self.file.resident(starts, ends - starts).all())


class KeptMaps:
    """The maps kept, by (owner, file), used longest ago first."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._maps: OrderedDict[tuple[int, int], KeptMap] = OrderedDict()
        self.nbytes = 0  # the kept files' sizes
        self._pid = os.getpid()
        self._owners = itertools.count()

    def owner(self) -> int:
        """A new owner's number (a source's: its files are numbered from 0)."""
        return next(self._owners)

    def get(
        self,
        owner: int,
        f: int,
        path: str,
        open_map: Callable[[], LocalFile | None],
        still_good: Callable[[LocalFile], bool] | None = None,
    ) -> KeptMap | None:
        """File ``f`` of ``owner`` (at ``path``) mapped: kept from a visit before if it
        is still the file at ``path`` (and ``still_good`` of it, where given: a cache
        entry's bytes this visit reads checked), else ``open_map()`` (``None``: not to be
        mapped)."""
        key = (owner, f)
        with self._lock:
            if self._pid != os.getpid():
                self._clear()  # a forked copy's: the parent's
                self._pid = os.getpid()
            kept = self._maps.pop(key, None)
            if kept is not None:
                self.nbytes -= kept.file.size
        if kept is not None and not (
            _at(path, kept.file) and (still_good is None or still_good(kept.file))
        ):
            kept = None
        if kept is None:
            file = open_map()
            if file is None:
                return None
            kept = KeptMap(file)
        if kept.file.size > KEPT_MAP_BYTES:
            return kept
        with self._lock:
            if not self._maps:
                hold_files(self)  # one of the holders sharing the descriptor limit
            self._maps[key] = kept
            self.nbytes += kept.file.size
            most = idle_share(most=KEPT_MAPS)
            while len(self._maps) > most or self.nbytes > KEPT_MAP_BYTES:
                # Dropped, not closed: a copy may still read it; its last reference
                # closes it.
                self.nbytes -= self._maps.popitem(last=False)[1].file.size
        return kept

    def kept(self, owner: int) -> dict[int, KeptMap]:
        """``owner``'s maps kept, by file."""
        with self._lock:
            return {f: m for (o, f), m in self._maps.items() if o == owner}

    def drop(self, owner: int) -> None:
        """Drop ``owner``'s maps (a source closed)."""
        with self._lock:
            for key in [k for k in self._maps if k[0] == owner]:
                self.nbytes -= self._maps.pop(key).file.size
            if not self._maps:
                release_files(self)

    def _clear(self) -> None:
        self._maps.clear()
        self.nbytes = 0
        release_files(self)

    def __len__(self) -> int:
        return len(self._maps)


def _at(path: str, file: LocalFile) -> bool:
    """Whether ``file`` is the file at ``path`` now (not renamed over, not deleted)."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == file.identity


#: The process's kept maps.
KEPT = KeptMaps()
