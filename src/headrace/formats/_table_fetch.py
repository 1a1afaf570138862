"""A :class:`~headrace.formats._tables.Table`'s spans read before their gather: the GETs
of row groups on object storage started (ahead, or all of a read's at once), and local
Parquet row groups read and decoded on threads at once."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor
from typing import Any

from headrace.errors import StorageError
from headrace.formats._arrow_remote import RemoteArrow
from headrace.formats._arrow_slice import SubFetch
from headrace.formats._arrow_slice import piece as arrow_piece
from headrace.formats._table_part import _Part
from headrace.formats._table_remote import Fetch, Fetched, RemoteParquet
from headrace.formats._table_spans import Spans
from headrace.io._batch import results
from headrace.io._waits import wait_done

__all__ = ["decode_at_once", "decode_span", "fetch_spans", "needs_decode"]


def fetch_spans(
    parts: Sequence[Any],
    spans: Spans,
    cache: Mapping[int, Mapping[str, Any]],
    todo: list[int],
    columns: Sequence[str],
    reads: Sequence[str],
) -> dict[int, Fetched]:
    """Start the GETs of the remote spans ``todo`` not decoded (with ``columns``) yet
    (``cache``: those decoded), by the first span of their row group: a sub-window's are
    the first pieces of its group's stream, unless the stream is there already (its
    GETs run ahead of it); an Arrow record batch's sub-window's are its own (the first
    round of its rows' ranges). ``reads``: the files' top-level columns that ``columns``
    lie in (a struct's field is read with its struct)."""
    wanted = frozenset(columns)
    names = frozenset(reads)
    out: dict[int, Fetched] = {}
    for s in todo:
        part = parts[int(spans.part[s])]
        cached = cache.get(s)
        if isinstance(part, _Part) or (cached is not None and wanted <= cached.keys()):
            continue
        group, head = int(spans.local[s]), spans.head(s)
        if head in out:
            continue
        if spans.alone[s]:
            assert isinstance(part, RemoteArrow)
            first, n = int(spans.first[s]), spans.rows(s)
            out[head] = SubFetch(part, group, first, n, names)
            continue
        if spans.cut[s]:
            assert isinstance(part, RemoteParquet)
            if not part.streams.usable(group, int(spans.first[s]), list(reads)):
                out[head] = part.stream_fetch(group, names)
            continue
        out[head] = part.fetch(group, names)
    return out


def decode_span(
    parts: Sequence[Any], spans: Spans, span: int, reads: list[str], fetched: Fetched | None
) -> tuple[Any, int]:
    """Span ``span`` of the files' columns ``reads``, read and decoded: a row group or
    record batch (on object storage from ``fetched``, fetched now if ``None``), or a
    sub-window of a row group that ``Table.split_groups`` cut, from its stream; and the
    rows of that stream skipped to reach it."""
    part = parts[int(spans.part[span])]
    group = int(spans.local[span])
    if not spans.cut[span]:
        if isinstance(part, _Part):
            return part.span(group, reads), 0
        assert isinstance(fetched, Fetch | None)  # a stream's only for a cut group
        return part.span(group, reads, fetched), 0
    first, n = int(spans.first[span]), spans.rows(span)
    if isinstance(part, RemoteArrow):
        return arrow_piece(part, group, first, n, reads, fetched), 0
    if isinstance(part, _Part):
        data, skipped = part.piece(group, first, n, reads)
    else:
        assert isinstance(part, RemoteParquet)
        data, skipped = part.piece(group, first, n, reads, fetched)
    return data, skipped


def needs_decode(
    parts: Sequence[Any],
    spans: Spans,
    cache: Mapping[int, Mapping[str, Any]],
    span: int,
    names: list[str],
) -> bool:
    """Whether ``span`` is a local Parquet row group that ``names`` need decoded."""
    part = parts[int(spans.part[span])]
    if not isinstance(part, _Part) or not part.parquet:
        return False
    cached = cache.get(span)
    return cached is None or not all(c in cached for c in names)


def decode_at_once(
    pool: Executor,
    spans: Spans,
    todo: list[int],
    decode: Callable[[int], Any],
    where: str,
) -> dict[int, Any]:
    """Local Parquet row groups ``todo``, each read and decoded by ``decode`` on
    ``pool``'s threads at once (every decode finishes before the first error is
    raised); ``where``: what a message names."""
    # The sub-windows of one streamed group are decoded in order, by one thread:
    # a later one taken first would decode the earlier on its way, then restart.
    jobs: dict[tuple[int, int], list[int]] = {}
    for s in sorted(todo):
        cut = bool(spans.cut[s])
        key = (int(spans.part[s]), int(spans.local[s])) if cut else (-1, s)
        jobs.setdefault(key, []).append(s)

    def run(group: list[int]) -> list[Any]:
        return [decode(s) for s in group]

    futures = {}
    try:
        for group in jobs.values():
            futures[tuple(group)] = pool.submit(run, group)
    except RuntimeError:  # close() shut the pool down under this read
        wait_done(futures.values())
        raise StorageError(f"{where}: the table was closed during the read") from None
    done = results(list(futures.values()), "other row group reads also failed")
    return {
        s: data
        for group, got in zip(futures, done, strict=True)
        for s, data in zip(group, got, strict=True)
    }
