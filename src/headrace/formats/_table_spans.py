"""Where a :class:`~headrace.formats._tables.Table`'s rows lie: its spans, each what is
decoded and cached as one (a row group, a record batch, or a sub-window of a Parquet
row group or of an Arrow record batch on object storage larger than ``window_rows``),
numbered in table order."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from headrace.errors import ConfigError
from headrace.formats._arrow_remote import RemoteArrow
from headrace.formats._arrow_slice import sliceable
from headrace.formats._row_plan import split_rows

__all__ = ["Groups", "Spans", "Views", "layout_spans", "row_indices"]

# A read's rows by span: (span, their places in the read, their rows in the span).
Groups = list[tuple[int, NDArray[np.int64], NDArray[np.int64]]]
# Each span's column views (:func:`~headrace.formats._table_gather.column_view`).
Views = Mapping[int, Mapping[str, tuple[Any, ...]]]


@dataclass(frozen=True, slots=True, kw_only=True)
class Spans:
    """Each span's first row in the table (and the end: ``starts[-1]`` rows), file,
    row group / record batch in that file, first row in that group, whether its
    group is cut in sub-windows of ``split_rows``, and whether such a sub-window is
    fetched on its own (``alone``: an Arrow record batch on object storage, read by
    its rows' ranges) rather than from its group's stream (Parquet)."""

    starts: NDArray[np.int64]
    part: NDArray[np.int64]
    local: NDArray[np.int64]
    first: NDArray[np.int64]
    cut: NDArray[np.bool_]
    alone: NDArray[np.bool_]
    split_rows: int | None

    def rows(self, span: int) -> int:
        return int(self.starts[span + 1] - self.starts[span])

    def head(self, span: int) -> int:
        """The first span of ``span``'s row group (itself unless the group is cut and
        streamed): what its bytes are fetched under."""
        if not self.cut[span] or self.alone[span]:
            return span
        assert self.split_rows is not None
        return span - int(self.first[span]) // self.split_rows

    def passed(self, span: int, cached: Iterable[int]) -> list[int]:
        """Of the ``cached`` spans, those not needed again once span ``span`` is read."""
        if not self.cut[span]:
            return []
        # A streamed group's sub-windows are read in order, once: the one before
        # this (a read may cross from it) is kept, no other sub-window is needed
        # again; past its first, neither is the window before the group's.
        later = bool(self.first[span])
        return [t for t in cached if (later or self.cut[t]) and t not in (span, span - 1)]

    def of(self, rows: NDArray[np.int64]) -> NDArray[np.int64]:
        """The span of each row."""
        return np.searchsorted(self.starts, rows, side="right") - 1

    def group(self, idx: NDArray[np.int64]) -> Groups:
        """The rows ``idx`` by span, in span order."""
        if not idx.size:
            return []
        span = self.of(idx)
        order = np.argsort(span, kind="stable")
        sorted_span = span[order]
        local = idx[order] - self.starts[sorted_span]
        # Slices of the sorted rows (np.split costs ~3 us a group more).
        cuts = [0, *(np.flatnonzero(np.diff(sorted_span)) + 1).tolist(), int(idx.size)]
        heads = sorted_span[cuts[:-1]].tolist()
        return [
            (s, order[a:b], local[a:b]) for s, a, b in zip(heads, cuts[:-1], cuts[1:], strict=True)
        ]


def layout_spans(
    part: NDArray[np.int64],
    local: NDArray[np.int64],
    rows: NDArray[np.int64],
    parts: Sequence[Any],
    window_rows: int | None,
) -> Spans:
    """The spans of the row groups (file ``part``, group ``local`` in it, ``rows``
    rows), Parquet row groups and uncompressed Arrow record batches on object storage
    (:func:`sliceable`) of more than ``window_rows`` rows cut in sub-windows. A local
    Arrow file is mapped: its record batches are not cut."""
    wr = window_rows
    pieces = np.ones(len(rows), dtype=np.int64)
    big = np.zeros(len(rows), dtype=bool)
    ranged = np.zeros(len(rows), dtype=bool)  # fetched a sub-window at a time
    if wr is not None:
        parquet = np.array([bool(p.parquet) for p in parts], dtype=bool)[part]
        big = rows > wr
        for g in np.flatnonzero(big & ~parquet):  # a look at each big Arrow batch's buffers
            p = parts[part[g]]
            ranged[g] = isinstance(p, RemoteArrow) and sliceable(
                p._pa, p.schema, p.index.buffers[local[g]]
            )
        big &= parquet | ranged
        pieces[big] = -(-rows[big] // wr)
    of = np.repeat(np.arange(len(rows), dtype=np.int64), pieces)
    # Each span's place in its group's sub-windows: 0 for a group read whole.
    k = np.arange(len(of), dtype=np.int64) - np.repeat(np.cumsum(pieces) - pieces, pieces)
    first = k * (wr or 0)  # its first row in the group
    cut = big[of]
    sizes = rows[of]
    if wr is not None:
        sizes[cut] = split_rows(rows[big], wr)
    return Spans(
        starts=np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
        part=part[of],
        local=local[of],
        first=first,
        cut=cut,
        alone=cut & ranged[of],
        split_rows=wr,
    )


def row_indices(
    indices: Sequence[int] | NDArray[np.integer], num_rows: int, where: str
) -> NDArray[np.int64]:
    """``indices`` as a flat ``int64`` array, checked: integers, each a row of the
    ``num_rows``; ``where``: what a message names for the table."""
    given = np.asarray(indices)
    if given.size and given.dtype.kind not in "iu":
        raise ConfigError(
            f"{where}: row indices must be integers (got {given.dtype}, e.g. "
            f"{given.reshape(-1)[0]!r}); a boolean mask: pass np.flatnonzero(mask)"
        )
    idx = given.astype(np.int64, copy=False).reshape(-1)
    if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= num_rows):
        bad = idx[(idx < 0) | (idx >= num_rows)][0]
        raise ConfigError(f"{where}: row {int(bad)} out of range for {num_rows} rows")
    return idx
