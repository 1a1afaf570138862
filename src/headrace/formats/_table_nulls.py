"""Null rows of a :class:`~headrace.formats._tables.Table`, refused: headrace does not
make up a value. A read refuses the null rows it meets (:func:`null_check`);
:meth:`~headrace.formats._tables.Table.refuse_nulls` refuses them all up front,
from Arrow record batch headers and Parquet row group statistics.

Either way the error counts the null rows and names the first few, with the files
that hold them, for every column that has some: a user cleaning the data fixes them
all at once, not one rerun per row (until 2026-12-03 it named the first row only).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from headrace.errors import FormatError
from headrace.formats._arrow_numpy import lists, null_rows, numbers, valid_rows, zero_filled
from headrace.formats._arrow_remote import RemoteArrow
from headrace.formats._map_guard import populate_buffers, struct_buffers
from headrace.formats._table_part import _Part
from headrace.formats._table_remote import RemoteParquet
from headrace.formats._table_schema import TableColumn, parquet_leaves, struct_child
from headrace.formats._table_spans import Spans

__all__ = [
    "MAX_NAMED_NULLS",
    "Misshapen",
    "NullRows",
    "item_check",
    "null_check",
    "null_error",
    "null_item_rows",
    "null_items_error",
    "refuse_nulls",
    "refuse_parquet_nulls",
    "refuse_path_only",
    "refuse_stored_nulls",
]

#: Null rows a refusal names one by one, per column (the rest are counted).
MAX_NAMED_NULLS = 10
#: Files a refusal names with their counts, per column (the rest are counted).
_MAX_NAMED_FILES = 5


@dataclass(slots=True)
class NullRows:
    """A column's null rows found so far: how many (``exact``: not a lower bound),
    the first :data:`MAX_NAMED_NULLS` (rows of the table, ascending), and how many
    each file holds, with the table row its first row is."""

    name: str
    count: int = 0
    exact: bool = True
    rows: list[int] = field(default_factory=list)
    files: dict[str, list[int]] = field(default_factory=dict)  # path: [count, first row]

    def add(self, path: str, file_start: int, count: int, rows: Sequence[int] = ()) -> None:
        if count <= 0:
            return
        self.count += count
        self.rows.extend(rows[: MAX_NAMED_NULLS - len(self.rows)])
        self.files.setdefault(path, [0, file_start])[0] += count

    @property
    def full(self) -> bool:
        """Whether as many rows are named as a refusal shows."""
        return len(self.rows) >= MAX_NAMED_NULLS


def _file_start(spans: Spans, span: int) -> int:
    """The table row of the first row of span ``span``'s file."""
    pi = int(spans.part[span])
    return int(spans.starts[int(np.searchsorted(spans.part, pi, side="left"))])


def null_error(found: Sequence[NullRows], scope: str = "", note: str = "") -> FormatError:
    """The refusal of the null rows ``found`` (columns without any are left out).
    ``scope``: where they were looked for, when not the whole table, and ``note``
    what that means for the rest."""
    found = [f for f in found if f.count]
    assert found
    said = []
    for k, f in enumerate(found):
        path, (_, start) = next(iter(f.files.items()))
        head = f"{path}: column {f.name!r}: " if k == 0 else f"column {f.name!r}: "
        if f.count == 1 and f.rows:
            text = f"row {f.rows[0]} is null" + (f", the only one{scope}" if scope else "")
        else:
            more = ", ..." if f.count > len(f.rows) else ""
            text = f"{'at least ' if not f.exact else ''}{f.count:,} rows are null{scope}"
            text += f": rows {', '.join(map(str, f.rows))}{more}" if f.rows else ""
        if f.rows and (len(f.files) > 1 or start):
            # Rows of the table (datasets' ds[i]); where the first lies in its file.
            text += (
                f" (table rows; the first is row {f.rows[0] - start} of {os.path.basename(path)})"
            )
        if len(f.files) > 1:
            counts = [f"{os.path.basename(p)}: {c:,}" for p, (c, _) in f.files.items()]
            rest = len(counts) - _MAX_NAMED_FILES
            text += f"; {len(f.files)} files hold them ({', '.join(counts[:_MAX_NAMED_FILES])}"
            text += f", and {rest} more)" if rest > 0 else ")"
        said.append(head + text + note)
    names = [f.name for f in found]
    test = " and ".join(f"r[{n!r}] is not None" for n in names)
    return FormatError(
        f"{'; '.join(said)}; headrace does not make up a value: fill or drop such rows "
        f"before reading (e.g. datasets' ds.filter(lambda r: {test})) or leave the "
        f"column{'s' if len(names) > 1 else ''} out"
    )


def null_check(
    parts: Sequence[Any], spans: Spans, name: str, span: int, valid: Any, loc: NDArray[np.int64]
) -> None:
    """Raise if a row ``loc`` of span ``span`` is null in column ``name`` (``valid``:
    its validity, ``None`` when it has no nulls), counting and naming the span's null
    rows (those read first): its other rows are at hand, the rest of the table is not."""
    if valid is not None:
        _refuse_rows(parts, spans, name, span, ~valid, loc, items=False)


@dataclass(frozen=True)
class Misshapen:
    """The rows of a span of a column of a fixed ``shape`` (a ``datasets`` ArrayND
    feature, or ``shapes=``'s; a first dimension ``None``: rows of items of the rest)
    that cannot be read as it: ``bad`` rows have a list of another length (``found``:
    that length, -1 for a null list; ``expected``: its level's dimension), ``nulls``
    rows (``None``: none) hold null numbers."""

    shape: tuple[int | None, ...]
    bad: NDArray[np.bool_]
    found: NDArray[np.int64]
    expected: NDArray[np.int64]
    nulls: NDArray[np.bool_] | None


def item_check(
    parts: Sequence[Any], spans: Spans, name: str, span: int, holes: Any, loc: NDArray[np.int64]
) -> None:
    """Raise if a row ``loc`` of span ``span`` holds null list items in column ``name``
    (``holes``: which of the span's rows do, ``None`` when none; a :class:`Misshapen`
    for a column of a fixed shape), naming the span's such rows, as :func:`null_check`
    does null rows. Its other rows read as they would without them: one bad row used to
    refuse every row of its row group."""
    if isinstance(holes, Misshapen):
        _refuse_misshapen(parts, spans, name, span, holes, loc)
        holes = holes.nulls
    if holes is not None:
        _refuse_rows(parts, spans, name, span, holes, loc, items=True)


def _refuse_misshapen(
    parts: Sequence[Any], spans: Spans, name: str, span: int, m: Misshapen, loc: NDArray[np.int64]
) -> None:
    """Raise if a row ``loc`` of span ``span`` does not have column ``name``'s shape,
    naming the row read first, then the span's other such rows."""
    hit = loc[m.bad[loc]]
    if not hit.size:
        return
    r, first = int(hit[0]), int(spans.starts[span])
    part = parts[int(spans.part[span])]
    what = "row group" if getattr(part, "parquet", False) else "record batch"
    has = "a null list" if m.found[r] < 0 else f"a list of {int(m.found[r])}"
    rows = np.flatnonzero(m.bad)
    named = ", ".join(str(first + int(i)) for i in rows[:MAX_NAMED_NULLS])
    more = ", ..." if rows.size > MAX_NAMED_NULLS else ""
    raise FormatError(
        f"{part.path}: column {name!r}: row {first + r} does not have the column's shape "
        f"{list(m.shape)}: {has} where {int(m.expected[r])} belong ({rows.size:,} such "
        f"row(s) in {what} {int(spans.local[span])}, rows [{first}, "
        f"{first + spans.rows(span)}) of the table: rows {named}{more}; the {what}'s other "
        "rows read as usual)"
    )


def _refuse_rows(
    parts: Sequence[Any],
    spans: Spans,
    name: str,
    span: int,
    bad: NDArray[np.bool_],
    loc: NDArray[np.int64],
    *,
    items: bool,
) -> None:
    """Raise if a row ``loc`` of span ``span`` is ``bad`` (null, or holding null list
    items if ``items``), naming the span's bad rows (the one read among them)."""
    if not bool(bad[loc].any()):
        return
    first = int(spans.starts[span])
    hit = loc[bad[loc]]
    rows = np.flatnonzero(bad)[:MAX_NAMED_NULLS]
    if hit[0] not in rows:  # the row read is named, whatever comes before it
        rows[-1] = hit[0]
        rows.sort()
    part = parts[int(spans.part[span])]
    found = NullRows(name)
    found.add(part.path, _file_start(spans, span), int(bad.sum()), (rows + first).tolist())
    what = "row group" if getattr(part, "parquet", False) else "record batch"
    end = first + spans.rows(span)
    scope = f" in {what} {int(spans.local[span])}, rows [{first}, {end}) of the table"
    if items:
        raise null_items_error([found], scope, f"; the {what}'s other rows read as usual")
    others = f"{what}{'es' if what.endswith('h') else 's'}"
    raise null_error([found], scope, f"; other {others} are checked as they are read")


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
    only = valid_rows(paths) & ~valid_rows(data)
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
    found: Mapping[str, NullRows],
    items: Mapping[str, NullRows] | None = None,
) -> None:
    """Count the null rows of ``found``'s columns in Arrow files into it: each record
    batch's header states its columns' null counts, so only a batch with nulls is read
    (or whose column is a struct: nulls of its fields are counted in their own nodes,
    not in the header's). On object storage a batch is fetched only while rows are
    still to be named, or for a struct's field (whose null rows are its nodes' union)."""
    names = list(found)
    reads = list(dict.fromkeys(columns[n].read for n in names))
    nodes: dict[tuple[int, str], list[int]] = {}  # a remote file's field nodes of a column
    for span, (pi, si) in enumerate(zip(spans.part, spans.local, strict=True)):
        part = parts[int(pi)]
        if not spans.rows(span):  # (a file of no rows may lack the column, or type it null)
            continue
        start = _file_start(spans, span)
        if isinstance(part, RemoteArrow):
            # The null counts were read with the headers (a struct field's with its
            # struct's): fetch only a batch with nulls, and only where they are needed.
            counts = {}
            itemed = False  # null list items: the list's child node, next after its own
            for n in names:
                if (int(pi), n) not in nodes:
                    nodes[int(pi), n] = part.field_nodes(columns[n].read, columns[n].field)
                counts[n] = part.index.nodes[int(si)][nodes[int(pi), n], 1]
                # (A dictionary's items are in its own batches: its rows checked as read.)
                if items is not None and columns[n].listed and not columns[n].decoded:
                    itemed |= bool(part.index.nodes[int(si)][nodes[int(pi), n][-1] + 1, 1])
            todo = [n for n in names if counts[n].any()]
            # A dictionary holding a null: the rows pointing at it are null, uncounted.
            coded = part.null_dictionaries(int(si)) and any(
                columns[n].arrow_type.startswith("dictionary<") for n in names
            )
            if not todo and not itemed and not coded:
                continue
            if not itemed and not coded and all(found[n].full for n in todo):
                for n in todo:
                    # A top-level column's header count is its null rows; a struct
                    # field's are the union of its nodes': at least the largest count.
                    found[n].add(part.path, start, int(counts[n].max()))
                    found[n].exact &= counts[n].size == 1 or int((counts[n] > 0).sum()) == 1
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
            if null_rows(col):
                null = np.flatnonzero(~valid_rows(col))
                rows = null[: MAX_NAMED_NULLS - len(found[name].rows)] + int(spans.starts[span])
                found[name].add(part.path, start, null.size, rows.tolist())
            if items is not None and tc.listed:
                # (a shaped column's lists: by their offsets, as other lists'; a tensor's
                # numbers lie in one fixed-size list a row)
                fixed = tc.kind == "fixed" and pa.types.is_fixed_size_list(
                    getattr(col, "storage", col).type
                )
                if hasattr(col, "sizes") and col.values.null_count:  # a list view: as a list
                    col = lists(pa, col)
                held = null_item_rows(col, tc.width if fixed else None)
                if held.size:
                    rows = held[: MAX_NAMED_NULLS - len(items[name].rows)] + int(spans.starts[span])
                    items[name].add(part.path, start, held.size, rows.tolist())


def null_item_rows(col: Any, width: int | None) -> NDArray[np.int64]:
    """The rows (of ``col``, a list array) that are not null but hold null items. The
    child's null count is in the record batch's header (a local Arrow file's: no read),
    so only a batch that has some reads the validity bitmaps. ``width``: a fixed-size
    list's (its null rows hold ``width`` items too). A list of lists (a datasets
    ArrayND) is left to its reads, which check every level."""
    col = getattr(col, "storage", col)  # an extension type's (ArrayND): its lists
    if hasattr(col, "dictionary"):  # dictionary-encoded lists: the rows of entries that do
        entries = null_item_rows(col.dictionary, width)
        if not entries.size:
            return entries
        naming = np.isin(zero_filled(col.indices), entries)
        if col.null_count:
            naming &= valid_rows(col)
        return np.flatnonzero(naming).astype(np.int64)
    values = col.values
    if not values.null_count or hasattr(values, "values"):
        return np.empty(0, np.int64)
    ok = valid_rows(values)
    if width is not None:
        start = col.offset * width
        bad = ~ok[start : start + len(col) * width].reshape(len(col), width).all(axis=1)
    else:
        offsets = numbers(col.offsets).astype(np.int64)
        nulls = np.concatenate([[0], np.cumsum(~ok, dtype=np.int64)])
        bad = nulls[offsets[1:]] > nulls[offsets[:-1]]
    if col.null_count:
        bad &= valid_rows(col)
    return np.flatnonzero(bad).astype(np.int64)


def null_items_error(found: Sequence[NullRows], scope: str = "", note: str = "") -> FormatError:
    """The refusal of rows holding null list items (``found``: by column); ``scope`` and
    ``note`` as :func:`null_error`'s."""
    found = [f for f in found if f.count]  # (the example names the first such column)
    said = []
    for k, f in enumerate(found):
        path, (_, start) = next(iter(f.files.items()))
        head = f"{path}: column {f.name!r}: " if k == 0 else f"column {f.name!r}: "
        more = ", ..." if f.count > len(f.rows) else ""
        text = f"{f.count:,} row(s) hold null list items{scope}: rows "
        text += ", ".join(map(str, f.rows)) + more
        if f.rows and start:  # table rows (datasets' ds[i]); where the first lies in its file
            text += (
                f" (table rows; the first is row {f.rows[0] - start} of {os.path.basename(path)})"
            )
        text += f" ({len(f.files)} files hold them)" if len(f.files) > 1 else ""
        said.append(head + text + note)
    return FormatError(
        f"{'; '.join(said)}; headrace does not make up values: fill or drop them before "
        f"reading (e.g. datasets' ds.filter(lambda r: None not in r[{found[0].name!r}])), "
        "or leave the column out"
    )


def refuse_parquet_nulls(
    pa: Any,
    parts: Sequence[Any],
    spans: Spans,
    columns: Mapping[str, TableColumn],
    found: Mapping[str, NullRows],
    valid_of: Callable[[int, str], Any],
) -> None:
    """Count the null rows of ``found``'s flat columns (numbers, strings, fixed-size
    binary) in Parquet files into it.

    A row group's statistics count a flat column's nulls, so only a row group
    that has some is decoded (that column, by ``valid_of(span, name)``: its
    validity), while rows are still to be named. A list's values are counted with
    its empty lists, so lists are checked as their rows are read.
    """
    flat = [n for n in found if columns[n].kind in ("scalar", "bytes") or columns[n].fixed_bytes]
    leaves: dict[int, dict[tuple[str, ...], int]] = {}
    seen: set[tuple[int, int]] = set()  # a row group's sub-windows share its statistics
    for span, (pi, si) in enumerate(zip(spans.part, spans.local, strict=True)):
        part = parts[int(pi)]
        if not flat or not isinstance(part, (_Part, RemoteParquet)):
            continue
        md = part.metadata
        if md is None or (int(pi), int(si)) in seen:  # an Arrow file, or closed
            continue
        seen.add((int(pi), int(si)))
        if int(pi) not in leaves:  # (None: not told apart; its rows checked as read)
            leaves[int(pi)] = parquet_leaves(pa, part.schema, md.num_columns) or {}
        group = md.row_group(int(si))
        for name in flat:
            j = leaves[int(pi)].get((columns[name].read, *columns[name].field))
            stats = None if j is None else group.column(j).statistics
            if stats is None or not stats.has_null_count or not stats.null_count:
                continue
            rows: list[int] = []
            if not found[name].full and not spans.cut[span]:
                valid = valid_of(span, name)
                if valid is not None:
                    null = np.flatnonzero(~np.asarray(valid, dtype=bool))[:MAX_NAMED_NULLS]
                    rows = (null + int(spans.starts[span])).tolist()
            found[name].add(part.path, _file_start(spans, span), int(stats.null_count), rows)


def refuse_nulls(
    pa: Any,
    parts: Sequence[Any],
    spans: Spans,
    columns: Mapping[str, TableColumn],
    names: Sequence[str],
    valid_of: Callable[[int, str], Any],
) -> None:
    """Refuse the null rows of ``names`` in the whole table, counted and named per
    column (:func:`refuse_parquet_nulls`, :func:`refuse_stored_nulls`)."""
    found = {n: NullRows(n) for n in dict.fromkeys(names)}
    items = {n: NullRows(n) for n in found}
    refuse_parquet_nulls(pa, parts, spans, columns, found, valid_of)
    refuse_stored_nulls(pa, parts, spans, columns, found, items)
    if any(f.count for f in found.values()):
        raise null_error(list(found.values()))
    if any(f.count for f in items.values()):
        raise null_items_error(list(items.values()))
