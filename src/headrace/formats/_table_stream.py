"""Sub-windows of a Parquet row group larger than a window, decoded by streaming.

``pq.write_table`` and pandas write row groups of 1,048,576 rows: a tokenized
dataset's row group is gigabytes decoded. Under the windowed shuffle such a group
is visited in sub-windows of ``window_rows`` consecutive rows, in row order
(:class:`~headrace.formats._row_plan.RowWindows`), so a reader decodes it as a
stream: :class:`GroupStream` keeps one ``iter_batches`` over the group and hands
out its rows a sub-window at a time, holding only that sub-window and one record
batch of a few MiB.

pyarrow (26 here) has no Python API that reads a row range of a row group:
``iter_batches`` and ``read_row_group`` start at its first row, and reads take no
row selection by page index. So a sub-window before the stream's place (a resume in the
middle of a group, a read that goes back) restarts the stream at the group's
first row and decodes, then drops, the rows before it.

The reader streams with ``pre_buffer=False`` and a read buffer: pyarrow's
default (``pre_buffer=True``) reads a column chunk whole into memory before the
first batch, the group's compressed size (338 MB for 1,048,576 rows of 64-256
int32 tokens; peak RSS 652 MB against 332 MB for the stream, whose first batch
came 4x sooner).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

__all__ = ["GroupStream", "STREAM_BUFFER", "Streams", "batch_rows"]

# pyarrow's read buffer of a streamed column chunk (pre_buffer off): a read per MiB.
STREAM_BUFFER = 1 << 20
# Rows per streamed record batch: about this many decoded bytes. pyarrow's record reader
# peaks at about 4x a batch (183 MB of its pool for batches of 65,536 rows of 640 bytes,
# 26 MB for 8,192), so batches stay small and a sub-window is gathered from several.
_BATCH_BYTES = 4 << 20


def batch_rows(metadata: Any, group: int, most: int) -> int:
    """Rows per streamed batch of row group ``group``: about ``_BATCH_BYTES`` decoded,
    at most ``most`` (a sub-window), at least 1."""
    rg = metadata.row_group(group)
    per_row = max(1, int(rg.total_byte_size) // max(1, int(rg.num_rows)))
    return max(1, min(most, _BATCH_BYTES // per_row))


class GroupStream:
    """One row group's rows ``names``, in order, decoded a few MiB (at most a
    sub-window) at a time.

    :meth:`take` gives rows ``[first, first + n)`` from the stream's place on
    (``first`` not before :attr:`pos`); the rows between are decoded and dropped
    (counted in :attr:`skipped`). Not thread-safe: one reader at a time takes it.
    """

    def __init__(
        self,
        pf: Any,
        pa: Any,
        group: int,
        names: Sequence[str],
        rows: int,
        most: int,
        *,
        source: Any = None,
    ) -> None:
        """``rows``: the group's; ``most``: rows per decoded batch at most (a sub-window);
        ``source``: the file ``pf`` reads, closed with it (pyarrow leaves a file it was
        given open)."""
        self._pf = pf
        self._source = source
        self._pa = pa
        self.group = group
        self.names = tuple(names)
        self.rows = rows  # in the group, as its footer says
        self._it = pf.iter_batches(
            batch_size=batch_rows(pf.metadata, group, most),
            row_groups=[group],
            columns=list(names),
        )
        self.pos = 0  # the first row not handed out or dropped yet
        self._carry: Any = None  # a batch's rows from pos on, not handed out yet
        #: rows decoded and dropped to reach a sub-window (a resume mid-group)
        self.skipped = 0

    def take(self, first: int, n: int) -> Any:
        """Rows ``[first, first + n)`` as one record batch (``first >= pos``)."""
        assert first >= self.pos, (first, self.pos)
        end = first + n
        parts = []
        while self.pos < end:
            if self._carry is None:
                try:
                    self._carry = next(self._it)
                except StopIteration:
                    raise EOFError(
                        f"the data ends after {self.pos} rows; the footer says {self.rows}"
                    ) from None
            have = self._carry.num_rows
            if self.pos + have <= first:  # wholly before the sub-window: dropped
                self.pos += have
                self.skipped += have
                self._carry = None
                continue
            if self.pos < first:
                self.skipped += first - self.pos
                self._carry = self._carry.slice(first - self.pos)
                have -= first - self.pos
                self.pos = first
            k = min(have, end - self.pos)
            parts.append(self._carry.slice(0, k))
            self._carry = None if k == have else self._carry.slice(k)
            self.pos += k
        if len(parts) == 1:
            return parts[0]
        table = self._pa.Table.from_batches(parts).combine_chunks()
        return table.to_batches()[0]

    @property
    def done(self) -> bool:
        return self.pos >= self.rows

    def close(self) -> None:
        self._it = iter(())
        self._carry = None
        self._pf.close()
        if self._source is not None:
            self._source.close()


class Streams:
    """A file's streams of row groups read in sub-windows, each at its place: at most
    two (a read may cross from one such group into the next), each holding a reader
    (a descriptor, or the GETs running ahead of it on object storage)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: OrderedDict[int, GroupStream] = OrderedDict()

    def usable(self, group: int, first: int, names: Sequence[str]) -> bool:
        """Whether group ``group``'s stream can go on to row ``first`` of ``names``."""
        with self._lock:
            st = self._open.get(group)
            return st is not None and st.pos <= first and st.names == tuple(names)

    def take(self, group: int, first: int, names: Sequence[str]) -> GroupStream | None:
        """Group ``group``'s stream, taken (no other thread reads through it meanwhile),
        if it can go on to row ``first``; one behind it is closed (``None``)."""
        with self._lock:
            st = self._open.pop(group, None)
        if st is not None and (st.pos > first or st.names != tuple(names)):
            st.close()  # behind the sub-window: the group starts again
            st = None
        return st

    def give_back(self, stream: GroupStream, keep: bool = True) -> None:
        """Keep ``stream`` for the group's next sub-window (closed at its end, or with
        ``keep`` false: its file was closed under the read)."""
        old = [stream]
        if keep and not stream.done:
            old = []
            with self._lock:
                self._open[stream.group] = stream
                while len(self._open) > 2:
                    old.append(self._open.popitem(last=False)[1])
        for st in old:
            st.close()

    def close(self) -> None:
        with self._lock:
            old, self._open = list(self._open.values()), OrderedDict()
        for st in old:
            st.close()
