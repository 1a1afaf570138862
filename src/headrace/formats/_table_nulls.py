"""Null rows of a :class:`~headrace.formats._tables.Table`, refused: headrace does not
make up a value. A read refuses the null rows it meets (:func:`null_check`);
:meth:`~headrace.formats._tables.Table.refuse_nulls` refuses them all up front,
from Arrow record batch headers and Parquet row group statistics."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from headrace.errors import FormatError
from headrace.formats._arrow_remote import RemoteArrow
from headrace.formats._map_guard import populate_buffers, struct_buffers
from headrace.formats._table_part import _Part
from headrace.formats._table_remote import RemoteParquet
from headrace.formats._table_schema import TableColumn, struct_child
from headrace.formats._table_spans import Spans

__all__ = ["null_check", "refuse_parquet_nulls", "refuse_path_only", "refuse_stored_nulls"]


def null_check(
    parts: Sequence[Any], spans: Spans, name: str, span: int, valid: Any, loc: NDArray[np.int64]
) -> None:
    """Raise if a row ``loc`` of span ``span`` is null in column ``name`` (``valid``:
    its validity, ``None`` when it has no nulls)."""
    if valid is not None and not bool(valid[loc].all()):
        row = int(spans.starts[span] + loc[~valid[loc]][0])
        part = parts[int(spans.part[span])]
        raise FormatError(
            f"{part.path}: column {name!r}: row {row} is null; headrace does not make "
            "up a value: fill or drop such rows before reading (e.g. datasets' "
            f"ds.filter(lambda r: r[{name!r}] is not None)) or leave the column out"
        )


def refuse_path_only(pa: Any, col: TableColumn, top: Any, path: str, first_row: int) -> None:
    """Refuse an image (or audio) column's row whose ``bytes`` are null but whose
    ``path`` is set (``top``: the span's top-level column ``col`` lies in, whose first
    row is the table's ``first_row``): the file it names is not fetched."""
    if col.field[-1:] != ("bytes",):
        return
    parent = struct_child(pa, top, col.field[:-1])
    if isinstance(parent, pa.ChunkedArray):
        parent = parent.combine_chunks()
    if parent.type.get_field_index("path") < 0:
        return
    data = struct_child(pa, parent, ("bytes",))
    if not data.null_count:
        return
    paths = struct_child(pa, parent, ("path",))
    only = np.asarray(
        paths.is_valid().to_numpy(zero_copy_only=False)
        & ~data.is_valid().to_numpy(zero_copy_only=False)
    )
    if only.any():
        i = int(np.flatnonzero(only)[0])
        raise FormatError(
            f"{path}: column {col.name!r}: row {first_row + i} holds no bytes, only a path "
            f"({paths[i].as_py()!r}); headrace reads images stored in the table and does "
            "not fetch the files paths name: store the bytes in the table (datasets "
            "embeds local files in ds.save_to_disk and push_to_hub; ds.to_parquet writes "
            "the paths as they are) or read the files with FileSource"
        )


def refuse_stored_nulls(
    pa: Any,
    parts: Sequence[Any],
    spans: Spans,
    columns: Mapping[str, TableColumn],
    names: Sequence[str],
) -> None:
    """Refuse null rows of ``names`` in Arrow files: each record batch's header states
    its columns' null counts, so only a batch with nulls is read (or whose column is a
    struct: nulls of its fields are counted in their own nodes, not in the header's)."""
    reads = list(dict.fromkeys(columns[n].read for n in names))
    nodes: dict[int, list[int]] = {}  # a remote file's field nodes of the columns read
    for span, (pi, si) in enumerate(zip(spans.part, spans.local, strict=True)):
        part = parts[int(pi)]
        if isinstance(part, RemoteArrow):
            # The null counts were read with the headers (a struct field's with its
            # struct's): fetch only a batch with nulls.
            if int(pi) not in nodes:
                nodes[int(pi)] = sorted(
                    {k for n in names for k in part.field_nodes(columns[n].read, columns[n].field)}
                )
            if not part.index.nodes[int(si)][nodes[int(pi)], 1].any():
                continue
            batch = part.span(int(si), reads)
        elif not isinstance(part, _Part) or part.parquet or part.closed:
            continue
        else:
            batch = part.batches[int(si)]
        for name in names:
            tc = columns[name]
            top = batch.column(tc.read)
            if isinstance(part, _Part) and part.network:
                populate_buffers(part, struct_buffers(pa, top, tc.field))
            refuse_path_only(pa, tc, top, part.path, int(spans.starts[span]))
            col = struct_child(pa, top, tc.field)
            if col.null_count:
                valid = np.asarray(col.is_valid().to_numpy(zero_copy_only=False))
                null_check(parts, spans, name, span, valid, np.arange(len(col)))


def refuse_parquet_nulls(
    parts: Sequence[Any],
    spans: Spans,
    columns: Mapping[str, TableColumn],
    names: Sequence[str],
    read_rows: Callable[[Any, list[str]], object],
) -> None:
    """Refuse null rows of flat columns (numbers, strings) of Parquet files now.

    A row group's statistics count a flat column's nulls, so only a row group
    that has some is decoded (that column, by ``read_rows``), to name the row. A
    list's values are counted with its empty lists, so lists are checked as their
    rows are read.
    """
    flat = [n for n in names if columns[n].kind in ("scalar", "bytes")]
    leaves: dict[int, dict[str, int]] = {}
    for span, (pi, si) in enumerate(zip(spans.part, spans.local, strict=True)):
        part = parts[int(pi)]
        if not flat or not isinstance(part, (_Part, RemoteParquet)):
            continue
        md = part.metadata
        if md is None:  # an Arrow file, or closed
            continue
        if int(pi) not in leaves:
            paths = (md.schema.column(j).path for j in range(md.num_columns))
            leaves[int(pi)] = {path: j for j, path in enumerate(paths)}
        group = md.row_group(int(si))
        for name in flat:
            j = leaves[int(pi)].get(".".join((columns[name].read, *columns[name].field)))
            stats = None if j is None else group.column(j).statistics
            if stats is not None and stats.has_null_count and stats.null_count:
                rows = np.arange(spans.starts[span], spans.starts[span + 1])
                read_rows(rows, [name])  # raises, naming the first null row
