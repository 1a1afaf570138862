"""Coalescing byte ranges into bounded spans, and scattering them back.

Pure NumPy: no I/O, no threads, no clocks. Readers sort requests, merge
neighbours whose gap is at most ``max_gap`` into spans of at most ``max_span``
bytes, read the spans, and slice every request back out in caller order, so
reads may be reordered while results never are. :func:`merge_ranges` is the
same joining for a few ``[start, end)`` spans as tuples (a sparse file's
fetches, a table's column chunks): no span limit, no map back to the requests.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np
from numpy.typing import NDArray

from headrace.errors import ConfigError

__all__ = [
    "DEFAULT_MAX_GAP",
    "DEFAULT_MAX_SPAN",
    "Coalesced",
    "Ranges",
    "as_ranges",
    "coalesce",
    "merge_ranges",
]

DEFAULT_MAX_GAP = 64 * 1024
DEFAULT_MAX_SPAN = 4 * 1024 * 1024
INT64_MAX = int(np.iinfo(np.int64).max)

#: ``(offset, length)`` pairs: a sequence of 2-tuples or an ``(N, 2)`` integer array.
Ranges: TypeAlias = "Sequence[tuple[int, int]] | NDArray[np.integer[Any]]"


def as_ranges(ranges: Ranges) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Validate ``ranges`` and return ``(offsets, lengths)`` as int64 arrays."""
    arr = np.asarray(ranges)
    if arr.size == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty.copy()
    if arr.ndim != 2 or arr.shape[1] != 2 or not np.issubdtype(arr.dtype, np.integer):
        raise ConfigError(
            f"Ranges must be (offset, length) integer pairs (got an array of shape "
            f"{arr.shape} and dtype {arr.dtype})."
        )
    if arr.dtype.kind == "u" and int(arr.max()) > INT64_MAX:
        # astype would wrap these to negative numbers: name them as given.
        i = int(np.flatnonzero((arr > INT64_MAX).any(axis=1))[0])
        raise _past_int64(i, int(arr[i, 0]), int(arr[i, 1]))
    a64 = arr.astype(np.int64, copy=False)
    offsets = np.ascontiguousarray(a64[:, 0])
    lengths = np.ascontiguousarray(a64[:, 1])
    bad = np.flatnonzero((offsets < 0) | (lengths < 0))
    if bad.size:
        i = int(bad[0])
        raise ConfigError(
            f"Range {i} is (offset={int(offsets[i])}, length={int(lengths[i])}); offsets and "
            "lengths must be non-negative."
        )
    # offset + length must not wrap: a wrapped end passed the EOF check, and a
    # mapped read sliced an empty array out of it.
    bad = np.flatnonzero(lengths > INT64_MAX - offsets)
    if bad.size:
        i = int(bad[0])
        raise _past_int64(i, int(offsets[i]), int(lengths[i]))
    return offsets, lengths


def _past_int64(i: int, offset: int, length: int) -> ConfigError:
    return ConfigError(
        f"Range {i} is (offset={offset}, length={length}); it ends past byte 2**63 - 1, "
        "beyond any file."
    )


def check_limits(max_gap: int, max_span: int) -> None:
    if not whole_number(max_gap) or max_gap < 0:
        raise ConfigError(f"max_gap must be a non-negative integer of bytes (got {max_gap!r}).")
    if not whole_number(max_span) or max_span < 1:
        raise ConfigError(f"max_span must be a positive integer of bytes (got {max_span!r}).")


def whole_number(v: object) -> bool:
    """An integer (a NumPy one too), not a bool: ``True`` is no number of bytes."""
    return not isinstance(v, bool) and isinstance(v, int | np.integer)


def at_least(name: str, value: object, least: int) -> int:
    """``value`` as a Python int, refused (``ConfigError`` naming ``name``) unless a
    :func:`whole_number` >= ``least``."""
    if not isinstance(value, int | np.integer) or isinstance(value, bool) or value < least:
        raise ConfigError(f"{name} must be an integer >= {least} (got {value!r}).")
    return int(value)


@dataclass(frozen=True, kw_only=True, slots=True)
class Coalesced:
    """Spans to read, and where each request lies in them.

    ``starts``/``ends`` are sorted by start; spans may overlap only when
    overlapping requests could not share a span without passing ``max_span``.
    Request ``i`` lies wholly in span ``span[i]``. A span is longer than
    ``max_span`` only when one request is.
    """

    starts: NDArray[np.int64]
    ends: NDArray[np.int64]
    span: NDArray[np.intp]

    @property
    def lengths(self) -> NDArray[np.int64]:
        return self.ends - self.starts

    def __len__(self) -> int:
        return len(self.starts)


def merge_ranges(spans: Iterable[tuple[int, int]], gap: int = 0) -> list[tuple[int, int]]:
    """``[start, end)`` spans sorted, empty ones dropped, and those at most ``gap``
    bytes apart joined (overlapping and touching ones always): one read each."""
    out: list[tuple[int, int]] = []
    for a, b in sorted(s for s in spans if s[1] > s[0]):
        if out and a <= out[-1][1] + gap:
            if b > out[-1][1]:
                out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


def coalesce(
    ranges: Ranges,
    *,
    max_gap: int = DEFAULT_MAX_GAP,
    max_span: int = DEFAULT_MAX_SPAN,
) -> Coalesced:
    """Merge ``(offset, length)`` requests into spans.

    Neighbours (in offset order) join a span when the gap to the span's end is
    at most ``max_gap`` and the span would stay within ``max_span`` bytes;
    overlapping and duplicate requests always share a span unless that breaks
    ``max_span``. Requests contained in the current span join it for free.
    """
    check_limits(max_gap, max_span)
    offsets, lengths = as_ranges(ranges)
    return coalesce_arrays(offsets, lengths, max_gap=max_gap, max_span=max_span)


def coalesce_arrays(
    offsets: NDArray[np.int64],
    lengths: NDArray[np.int64],
    *,
    max_gap: int,
    max_span: int,
) -> Coalesced:
    n = len(offsets)
    if n == 0:
        empty = np.zeros(0, dtype=np.int64)
        return Coalesced(starts=empty, ends=empty.copy(), span=np.zeros(0, dtype=np.intp))
    order = np.argsort(offsets, kind="stable")
    s = offsets[order]
    e = s + lengths[order]
    # Gap breaks are vectorised; only groups wider than max_span need the
    # sequential walk, because where a span ends depends on where it began.
    run_end = np.maximum.accumulate(e)
    new = np.empty(n, dtype=bool)
    new[0] = True
    new[1:] = (s[1:] - run_end[:-1]) > max_gap
    first = np.flatnonzero(new)
    group_end = np.maximum.reduceat(e, first)
    wide = np.flatnonzero(group_end - s[first] > max_span)
    if wide.size:
        bounds = np.append(first, n)
        s_list, e_list = s.tolist(), e.tolist()
        for g in wide.tolist():
            lo, hi = int(bounds[g]), int(bounds[g + 1])
            cur_start, cur_end = s_list[lo], e_list[lo]
            for j in range(lo + 1, hi):
                ej = e_list[j]
                if ej <= cur_end:
                    continue  # contained: joins for free
                if ej - cur_start > max_span:
                    new[j] = True
                    cur_start = s_list[j]
                cur_end = ej
        first = np.flatnonzero(new)
    starts = s[first]
    ends = np.maximum.reduceat(e, first)
    span = np.empty(n, dtype=np.intp)
    span[order] = np.cumsum(new) - 1
    return Coalesced(starts=starts, ends=ends, span=span)


def chunk_spans(
    starts: NDArray[np.int64], ends: NDArray[np.int64], chunk: int
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64], NDArray[np.intp]]:
    """Split spans into pieces of at most ``chunk`` bytes, for parallel reads.

    Returns ``(piece_starts, piece_ends, piece_pos, owner)`` where
    ``piece_pos`` is the piece's offset in a buffer holding all spans back to
    back and ``owner`` the span each piece belongs to (non-decreasing).
    """
    lengths = ends - starts
    buf_pos = np.zeros(len(starts), dtype=np.int64)
    if len(starts) > 1:
        np.cumsum(lengths[:-1], out=buf_pos[1:])
    pieces = np.maximum((lengths + chunk - 1) // chunk, 1)
    if int(pieces.max(initial=1)) == 1:
        return starts, ends, buf_pos, np.arange(len(starts), dtype=np.intp)
    owner = np.repeat(np.arange(len(starts), dtype=np.intp), pieces)
    first_piece = np.zeros(len(starts), dtype=np.int64)
    np.cumsum(pieces[:-1], out=first_piece[1:])
    k = np.arange(len(owner), dtype=np.int64) - first_piece[owner]
    p_start = starts[owner] + k * chunk
    p_end = np.minimum(p_start + chunk, ends[owner])
    p_pos = buf_pos[owner] + k * chunk
    return p_start, p_end, p_pos, owner
