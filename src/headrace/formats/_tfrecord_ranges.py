"""TFRecord shards read by records: the record headers walked once (by the count, kept
from it), then only the records a read asks (``tfrecord_ranges_above``).

A TFRecord file has no index: record ``k``'s place is known only from the lengths of
the records before it. Under ``shuffle="samples"`` a shard of 1,000 records is visited
by about one record a read, and fetching it whole read 1,000 times the bytes used.
Here a shard's first read by records walks its 12-byte headers (locally a ``pread``
a block; on object storage ranged GETs of growing spans, 4 KiB to ``WALK_CAP``, so
records under ``WALK_SKIP`` cost far less than a GET each), each length's CRC
checked; the index (16 bytes a record) is kept for the files read last. A read then
fetches each record asked, header to data CRC, neighbours within 64 KiB joined, all in
flight at once, and checks its data's CRC.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from headrace.formats._lazy_queue import LazyQueue
from headrace.formats._npy_ranges import CACHE_BLOCK
from headrace.formats._sparse import Span, SparseImage
from headrace.formats._tfrecord import FOOTER, HEADER, walk_records

if TYPE_CHECKING:
    from headrace.formats._file_list import FileList

__all__ = ["RangedTfrecord", "RecordImage"]

#: The record indexes a source keeps, of the files read last (16 bytes a record); one
#: larger is kept alone.
INDEX_BYTES = 16 << 20

Index = tuple[NDArray[np.int64], NDArray[np.int64]]


class RecordImage(SparseImage):
    """A TFRecord file's sparse image with its record index (``records``: each record's
    data offset and length): a want of records fetches each one whole."""

    def __init__(
        self,
        size: int,
        fetch: Callable[[list[Span], NDArray[np.uint8]], None],
        name: str,
        records: Index,
    ) -> None:
        super().__init__(size, fetch, name)
        self.records = records

    def want(self, rows: NDArray[np.int64]) -> None:
        starts, lengths = self.records
        # Rows past the records (a count given that is wrong) are not fetched: the
        # decode refuses them, naming the file and both counts (an IndexError here until
        # 2026-12-07).
        rows = rows[rows < len(starts)]
        a = starts[rows] - HEADER
        b = starts[rows] + lengths[rows] + FOOTER
        self.fill(list(zip(a.tolist(), b.tolist(), strict=True)))


class RangedTfrecord:
    """Record images of one source's TFRecord files (local or remote).

    ``files()``: the source's current listing; ``above``: files from this size up are
    read so. A subclass reads another format by its records (``walk``: a file's index
    from ``walk(at, size, name)``; ``image_type``: its images).
    """

    walk: Callable[[Any, int, str], Index] = staticmethod(walk_records)
    image_type: type[RecordImage] = RecordImage
    #: ``walk`` reads forward, a header a miss (TFRecord; an ArrayRecord footer is not)
    walks = True

    def __init__(self, files: Callable[[], FileList], in_flight: int, above: int) -> None:
        self._files = files
        self.above = above
        self._lock = threading.Lock()
        self._kept: OrderedDict[int, Index] = OrderedDict()  # least recently used first
        self._kept_bytes = 0
        self._queue = LazyQueue(in_flight, "headrace-tfrecord-rows")

    def seed(self, indexes: Mapping[int, bytes]) -> None:
        """Keep the record indexes ``samples_per_file="header"``'s count walked (file ->
        each record's data offset, then length, as int64 bytes): a shard's first read
        then fetches its records only, not its headers a second time."""
        files = self._files()
        for f, raw in indexes.items():
            if files.sizes[f] >= self.above:
                both = np.frombuffer(raw, np.int64)
                n = len(both) // 2
                self._keep(f, (both[:n], both[n:]))

    def held(self) -> dict[int, bytes]:
        """The indexes kept, as :meth:`seed` takes them: for a copy of the source (a
        worker's) to read records without walking the headers again."""
        with self._lock:
            kept = list(self._kept.items())
        return {f: np.concatenate(index).tobytes() for f, index in kept}

    def applies(self, f: int) -> bool:
        """Whether file ``f`` is read by records: at least ``above`` bytes."""
        return self._files().sizes[f] >= self.above

    def image(self, f: int, rows: NDArray[np.int64] | None) -> RecordImage:
        """File ``f``'s records ``rows`` (``None``: none yet; the decode's
        :meth:`RecordImage.want` fetches them), its index walked if not kept."""
        files = self._files()
        if files.remote:
            fetch = files.fetch_ranges(f, self._queue.get(), cache_block=CACHE_BLOCK)
        else:
            fetch = files.local_ranges(f)
        with self._lock:
            index = self._kept.get(f)
            if index is not None:
                self._kept.move_to_end(f)
        if index is None:
            walker = SparseImage(files.sizes[f], fetch, files.name(f))
            walker.walking = files.remote and self.walks
            index = self.walk(walker.at, walker.size, walker.name)
            self._keep(f, index)
        image = self.image_type(files.sizes[f], fetch, files.name(f), index)
        if rows is not None:
            image.want(rows)
        return image

    def _keep(self, f: int, index: Index) -> None:
        n = index[0].nbytes + index[1].nbytes
        with self._lock:
            # One index past the bound is kept alone (the others dropped): each read of its
            # file needs it, and one not kept was walked again at every read.
            if f in self._kept:
                return
            self._kept[f] = index
            self._kept_bytes += n
            while self._kept_bytes > INDEX_BYTES and len(self._kept) > 1:
                _, old = self._kept.popitem(last=False)
                self._kept_bytes -= old[0].nbytes + old[1].nbytes

    def close(self) -> None:
        """Close the request queue (the indexes are kept: the files are the ones listed)."""
        self._queue.close()
