"""Tar shards read by samples: the members of the samples a read asks, not the shard.

Under ``shuffle="samples"`` a shard of 10,000 samples is visited by about one sample
a read, and fetching it whole read 10,000 times the bytes used. Here a shard is held
as a :class:`TarImage` into which only the members of the samples asked are fetched
(locally a ``pread`` a span; on object storage ranged GETs, all in flight at once,
neighbours within 64 KiB joined). Where those members lie is the shard's
:class:`~headrace.formats._tar.TarIndex`: the one the source's count walked
(``samples_per_file="header"``, the default), else learned by walking the shard's
headers at its first read (a 512-byte header a member; a read of at least 4 KiB where
one is not held already, growing spans on object storage: ``WALK_CAP``); kept, as
arrays, up to ``INDEX_BYTES`` for all shards (one larger is kept alone).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from headrace.formats._buffer import Buffer, as_bytes_view
from headrace.formats._lazy_queue import LazyQueue
from headrace.formats._npy_ranges import CACHE_BLOCK
from headrace.formats._sparse import Span, SparseImage
from headrace.formats._tar import TarIndex, tar_index

if TYPE_CHECKING:
    from headrace.formats._file_list import FileList

__all__ = ["INDEX_BYTES", "HeldIndexes", "RangedTar", "TarImage", "TarIndexes"]

#: The shard indexes a source keeps, of the shards read last (about 20 bytes a member).
INDEX_BYTES = 64 << 20


class TarImage(SparseImage):
    """A shard of which only its samples' members asked are held, and its index."""

    def __init__(
        self,
        size: int,
        fetch: Callable[[list[Span], NDArray[np.uint8]], None],
        name: str,
        fields: Sequence[str] | None,
    ) -> None:
        super().__init__(size, fetch, name)
        self.fields = fields
        self.index: TarIndex | None = None

    def want(self, rows: NDArray[np.int64]) -> None:
        """Fetch the members of samples ``rows`` (their ``fields``), if not held."""
        if self.index is not None:
            # Rows past the samples (a count given that is wrong) are not fetched: the
            # decode refuses them, naming the shard and both counts (an IndexError here
            # until 2026-12-07).
            rows = rows[rows < len(self.index)]
            self.fill(self.index.spans(rows.tolist(), self.fields))


class TarIndexes:
    """The indexes of the shards read last, up to ``INDEX_BYTES``: a shard's samples come
    in runs over many reads (``shuffle="files"``), and walking its headers again for
    each took 0.09 s a read for 20,000 members. ``cut`` (``on_corrupt="replace"``): a
    shard cut short is walked to its samples before the cut, as the count walked it
    (see :func:`~headrace.formats._tar.tar_index`)."""

    def __init__(self, cut: bool = False) -> None:
        self.cut = cut
        self._lock = threading.Lock()
        self._kept: OrderedDict[int, TarIndex] = OrderedDict()  # least recently used first
        self._kept_bytes = 0

    def get(self, f: int) -> TarIndex | None:
        with self._lock:
            index = self._kept.get(f)
            if index is not None:
                self._kept.move_to_end(f)
            return index

    def of(self, f: int, data: Buffer, name: str) -> TarIndex:
        """Shard ``f``'s index, walked over ``data`` (its bytes) if not kept."""
        index = self.get(f)
        if index is None:
            view = as_bytes_view(data, name)
            index = tar_index(lambda a, n: view[a : a + n], len(view), name, self.cut)
            self.keep(f, index)
        return index

    def held(self) -> HeldIndexes:
        """The indexes kept, least recently used first (what a worker's copy carries)."""
        with self._lock:
            return HeldIndexes(self._kept.items())

    def take(self, held: Sequence[tuple[int, TarIndex]]) -> None:
        """Keep the indexes ``held`` (another copy's, of the same listing)."""
        for f, index in held:
            self.keep(f, index)

    def keep(self, f: int, index: TarIndex) -> None:
        with self._lock:
            # One index past the bound is kept alone (the others dropped): each read of its
            # shard needs it, and one not kept was walked again at every read.
            if f in self._kept:
                return
            self._kept[f] = index
            self._kept_bytes += index.nbytes
            while self._kept_bytes > INDEX_BYTES and len(self._kept) > 1:
                _, old = self._kept.popitem(last=False)
                self._kept_bytes -= old.nbytes


_ARRAYS = ("keys", "header", "first", "field", "at", "size")


class HeldIndexes(list[tuple[int, TarIndex]]):
    """Shards' indexes (``(shard, index)`` pairs) that pickle as one buffer of all their
    arrays, not six arrays an index: 1,000 shards' (6,000 arrays) took 0.55 s to pickle
    and 0.36 s to load in each worker, now 0.23 and 0.13 (medians, 2c under load,
    2026-12-04: benchmarks/tar_index_scale.py). A loaded copy's indexes view that
    buffer (read-only)."""

    def __reduce__(self) -> tuple[Any, ...]:
        arrays = [np.ascontiguousarray(getattr(i, a)) for _, i in self for a in _ARRAYS]
        # Each array's bytes from a multiple of 8, so that the views are aligned.
        sizes = np.array([a.nbytes for a in arrays], dtype=np.int64)
        at = np.concatenate(([0], np.cumsum(-(-sizes // 8) * 8)))
        buf = np.zeros(int(at[-1]), dtype=np.uint8)
        for a, lo in zip(arrays, at.tolist(), strict=False):
            buf[lo : lo + a.nbytes] = a.reshape(-1).view(np.uint8)
        counts = np.array([a.size for a in arrays], dtype=np.int64)
        dtypes = ",".join(a.dtype.str for a in arrays)
        shards = np.array([f for f, _ in self], dtype=np.int64)
        names = [i.names for _, i in self]
        return (_unpack, (shards, names, dtypes, at[:-1], counts, buf))


def _unpack(
    shards: NDArray[np.int64],
    names: list[tuple[str, ...]],
    dtypes: str,
    at: NDArray[np.int64],
    counts: NDArray[np.int64],
    buf: NDArray[np.uint8],
) -> HeldIndexes:
    kinds = dtypes.split(",") if dtypes else []
    buf.setflags(write=False)  # shared by the indexes' views
    out = HeldIndexes()
    k = len(_ARRAYS)
    for j, f in enumerate(shards.tolist()):
        arrays = [
            buf[lo : lo + n * np.dtype(kind).itemsize].view(kind)
            for kind, lo, n in zip(
                kinds[j * k : j * k + k],
                at[j * k : j * k + k].tolist(),
                counts[j * k : j * k + k].tolist(),
                strict=True,
            )
        ]
        keys, header, first, field, at_, size = arrays
        index = TarIndex(keys, header, first, field, at_, size, names=names[j])
        out.append((f, index))
    return out


class RangedTar:
    """Tar images of one source's shards, read by samples (local or remote).

    ``files()``: the source's current listing; ``fields``: those read (``None``: all);
    ``indexes``: where the shards' indexes are kept (the source's: the count's walks).
    """

    def __init__(
        self,
        files: Callable[[], FileList],
        fields: Sequence[str] | None,
        in_flight: int,
        indexes: TarIndexes,
    ) -> None:
        self._files = files
        self._fields = fields
        self.indexes = indexes
        self._queue = LazyQueue(in_flight, "headrace-tar-samples")

    def applies(self, f: int) -> bool:  # noqa: ARG002 (every shard: the protocol of by_rows)
        """Whether shard ``f`` is read by samples: always."""
        return True

    def image(self, f: int, rows: NDArray[np.int64] | None) -> TarImage:
        """Shard ``f``'s index and the members of samples ``rows`` (``None``: the index
        only; the decode's :meth:`TarImage.want` fetches the members it then asks)."""
        files = self._files()
        if files.remote:
            fetch = files.fetch_ranges(f, self._queue.get(), cache_block=CACHE_BLOCK)
        else:
            fetch = files.local_ranges(f)
        image = TarImage(files.sizes[f], fetch, files.name(f), self._fields)
        index = self.indexes.get(f)
        if index is None:
            image.walking = files.remote
            index = tar_index(image.at, image.size, image.name, self.indexes.cut)
            image.walking = False  # the members' reads are not a walk
            self.indexes.keep(f, index)
        image.index = index
        if rows is not None:
            image.want(rows)
        return image

    def close(self) -> None:
        """Close the request queue (the indexes are kept: the shards are the ones listed)."""
        self._queue.close()
