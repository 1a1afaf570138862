"""Which pages of a :class:`~headrace.formats._tables.Table`'s memory-mapped Arrow files
to fault in on the deep I/O pool (:mod:`headrace.formats._map_fill`): those where a
read's rows lie, before the gather, and whole spans ahead of their window."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from headrace.formats._arrow_remote import RemoteArrow
from headrace.formats._map_fill import FillPolicy, MappedFile, fill_pages, page_runs
from headrace.formats._table_part import _Part
from headrace.formats._table_remote import RemoteParquet
from headrace.formats._table_schema import TableColumn
from headrace.formats._table_spans import Groups, Spans, Views

__all__ = ["Ranges", "ahead_jobs", "fill_maps", "mapped", "row_ranges"]

# Spans remembered as asked for ahead (each is filled once while remembered).
_AHEAD_SPANS = 4096

# Byte ranges of spans: (span, addresses, lengths).
Ranges = Iterable[tuple[int, NDArray[np.int64], NDArray[np.int64]]]


def mapped(part: _Part | RemoteParquet | RemoteArrow) -> bool:
    """Whether ``part``'s spans are views of a memory map (a local Arrow file): free to keep."""
    return isinstance(part, _Part) and not part.parquet


def fill_maps(parts: Sequence[Any], spans: Spans, ranges: Ranges, policy: FillPolicy) -> None:
    """Fault in, on the deep I/O pool, the pages that the byte ranges ``(span, address,
    length)`` of mapped spans touch, counted in ``policy``."""
    by_part: dict[int, list[tuple[NDArray[np.int64], NDArray[np.int64]]]] = {}
    for s, address, length in ranges:
        by_part.setdefault(int(spans.part[s]), []).append((address, length))
    jobs = []
    for pi, got in by_part.items():
        part = parts[pi]
        assert isinstance(part, _Part)
        address = np.concatenate([a for a, _ in got])
        length = np.concatenate([n for _, n in got])
        jobs.append((part, page_runs(address, length, part)))
    if jobs:
        faults = fill_pages(jobs)
        policy.filled(sum(len(r) for _, r in jobs), faults)


def row_ranges(
    parts: Sequence[Any],
    spans: Spans,
    columns: Mapping[str, TableColumn],
    names: list[str],
    groups: Groups,
    views: Views,
) -> Iterator[tuple[int, NDArray[np.int64], NDArray[np.int64]]]:
    """The byte ranges of mapped spans where the rows' numbers, fixed-size lists and
    list offsets lie (a list's values: the gather's, once the offsets say where)."""
    for s, _, loc in groups:
        if not mapped(parts[int(spans.part[s])]):
            continue
        for c in names:
            listed = columns[c].kind not in ("scalar", "fixed")
            arr = views[s][c][1 if listed else 0]  # a list's offsets, or the values
            row = arr.strides[0]
            # offsets[i] and offsets[i + 1] bound list i
            yield s, arr.ctypes.data + loc * row, np.full(loc.size, row * (1 + listed))


def ahead_jobs(
    parts: Sequence[Any],
    spans: Spans,
    todo: Sequence[int] | NDArray[np.integer],
    names: list[str],
    ahead: OrderedDict[int, bool],
    views: Callable[[int, list[str]], Mapping[str, tuple[Any, ...]]],
) -> list[tuple[MappedFile, list[tuple[int, int]]]]:
    """The page runs of the buffers of ``names`` in the mapped spans ``todo`` not asked
    for yet (a windowed shuffle reads each one whole within its window); ``ahead``
    remembers those asked for, ``views`` makes a span's column views."""
    by_part: dict[int, list[tuple[int, int]]] = {}
    checked: set[int] = set()
    for s in dict.fromkeys(int(x) for x in todo):
        pi = int(spans.part[s])
        part = parts[pi]
        if s in ahead or not mapped(part):
            continue
        if pi not in checked:
            # As read_rows: making views reads through the map (a validity bitmap, a
            # dictionary), and pages a truncation took away are SIGBUS.
            assert isinstance(part, _Part)
            part.check_size()
            checked.add(pi)
        ahead[s] = True
        for c in names:
            by_part.setdefault(pi, []).extend(
                (a.ctypes.data, a.nbytes)
                for a in views(s, [c])[c]
                if isinstance(a, np.ndarray) and a.nbytes
            )
    while len(ahead) > _AHEAD_SPANS:
        ahead.popitem(last=False)
    jobs: list[tuple[MappedFile, list[tuple[int, int]]]] = []
    for pi, ranges in by_part.items():
        part = parts[pi]
        assert isinstance(part, _Part)
        address = np.array([a for a, _ in ranges], dtype=np.int64)
        length = np.array([n for _, n in ranges], dtype=np.int64)
        jobs.append((part, page_runs(address, length, part)))
    return jobs
