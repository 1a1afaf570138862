"""ArrayRecord files read by chunks: the footer read once (by the count, kept from it),
then only the chunks holding the records a read asks.

A chunk is ``group_size`` records compressed together, so a record costs its whole
chunk: read, and decompressed. Grain recommends ``group_size:1`` for random access
(a chunk a record); the writer's default (65,536) reads a whole file's worth of
records for one. Chunks are not kept between reads (a read's records of one chunk
are decoded together).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from headrace.formats._array_record import chunk_of, read_index
from headrace.formats._tfrecord_ranges import RangedTfrecord, RecordImage

__all__ = ["ChunkImage", "RangedArrayRecord"]


class ChunkImage(RecordImage):
    """An ArrayRecord file's sparse image with its chunks (``records``: each chunk's
    offset and first record, see :func:`~headrace.formats._array_record.read_index`):
    a want of records fetches the chunks holding them."""

    def want(self, rows: NDArray[np.int64]) -> None:
        offsets, firsts = self.records
        # Rows past the records (a count given that is wrong) are not fetched: the decode
        # refuses them, naming the file and both counts (an IndexError here until
        # 2026-12-07).
        chunks = np.unique(chunk_of(self.records, rows[rows < firsts[-1]]))
        self.fill(list(zip(offsets[chunks].tolist(), offsets[chunks + 1].tolist(), strict=True)))


class RangedArrayRecord(RangedTfrecord):
    """Chunk images of one source's ArrayRecord files (local or remote)."""

    walk = staticmethod(read_index)
    walks = False
    image_type = ChunkImage
