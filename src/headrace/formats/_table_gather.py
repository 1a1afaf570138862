"""A :class:`~headrace.formats._tables.Table`'s rows gathered: each span's columns as
NumPy views (:func:`column_view`), and the rows a read asks for copied out of them in
bulk, per span (:func:`gather`), into one array or :class:`Ragged` per column."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from headrace.errors import FormatError
from headrace.formats._arrow_numpy import numbers, valid_rows, zero_filled
from headrace.formats._map_fill import FillPolicy
from headrace.formats._ragged import Ragged
from headrace.formats._table_fill import fill_maps, mapped
from headrace.formats._table_nulls import item_check, null_check, null_item_rows
from headrace.formats._table_schema import VIEWS, TableColumn
from headrace.formats._table_spans import Groups, Spans, Views

__all__ = ["column_view", "gather"]

# Above this mean row length a per-row slice copy beats building index arrays.
_LONG_ROW = 32


def column_view(
    pa: Any, col: TableColumn, path: str, where: str, first_row: int, arr: Any
) -> tuple[Any, ...]:
    """NumPy views of column ``col`` of one span (``where``: its row group or record
    batch and rows, for messages; its first row in the table is ``first_row``) of the
    file ``path``: ``(values, valid, holes)`` for numbers and fixed-size
    lists, ``(values, offsets, valid, holes)`` for lists and strings; ``valid`` is
    ``None`` without null rows, ``holes`` (which rows hold null list items, their
    places zeros in ``values``) without such rows."""
    name = col.name
    try:
        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks()
        if pa.types.is_dictionary(arr.type):
            arr = arr.dictionary_decode()  # a copy of this span's values, nulls kept
        # A local Arrow file is mapped and read without a copy: its lengths are the
        # file's own, and a damaged one (a list's values of negative length) made
        # NumPy read outside a buffer: a segfault. validate() checks lengths against
        # buffer sizes, with no pass over the data. A list's offsets are left to the
        # checks where rows are cut (gather), which name the row.
        if col.shape:
            return _array_view(pa, col, path, first_row, arr)
        if col.kind == "ragged":
            arr.values.validate()
        else:
            arr.validate()
        valid = holes = None
        if arr.null_count:
            valid = valid_rows(arr)
        if col.kind == "scalar":
            # With nulls, to_numpy turns integers into float64 with NaN, which
            # rounds int64 values past 2**53; nulls become 0 here instead (the
            # rows are refused by null_check anyway).
            return (zero_filled(arr), valid, None)
        if col.fixed_bytes:  # fixed_size_binary: k bytes a row in one buffer
            k, data = col.width, arr.buffers()[1]
            flat = (
                np.frombuffer(data, np.uint8, count=len(arr) * k, offset=arr.offset * k)
                if len(arr)
                else np.empty(0, np.uint8)
            )
            return (flat.reshape(len(arr), k), valid, None)
        if col.kind == "fixed":
            # The child values of every slot, null rows included, so that row
            # i stays at items [i*k, (i+1)*k) (flatten() skips null rows).
            k = col.width
            items = arr.values.slice(arr.offset * k, len(arr) * k)
            if items.null_count:
                # Zeros hold the null items' places; the rows holding them are refused
                # when read (item_check), not every row of the span.
                holes = _holes(null_item_rows(arr, k), len(arr))
            flat = zero_filled(items)
            return (flat.reshape(len(arr), k), valid, holes)
        if col.kind == "ragged":
            values = arr.values
            if values.null_count:
                holes = _holes(null_item_rows(arr, None), len(arr))
            return (
                zero_filled(values),  # a view; a copy where items are null (damaged data)
                numbers(arr.offsets, zero_copy_only=True),
                valid,
                holes,
            )
        if str(arr.type) in VIEWS:  # strings held as views: offsets and data, a copy
            arr = arr.cast(getattr(pa, VIEWS[str(arr.type)])())
        bufs = arr.buffers()
        off_dtype = (
            np.int64
            if (pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type))
            else np.int32
        )
        offsets = np.frombuffer(bufs[1], dtype=off_dtype)[arr.offset : arr.offset + len(arr) + 1]
        data = (
            np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.empty(0, np.uint8)
        )
        return (data, offsets, valid, None)
    except (pa.ArrowException, ValueError) as exc:  # NumPy: a buffer cut mid-item
        raise FormatError(f"{path}: column {name!r}: corrupt data in {where} ({exc})") from exc


def _holes(rows: NDArray[np.int64], n: int) -> NDArray[np.bool_] | None:
    """Which of a span's ``n`` rows hold null list items (``rows``); ``None``: none."""
    if not rows.size:
        return None
    out = np.zeros(n, dtype=bool)
    out[rows] = True
    return out


def _array_view(
    pa: Any, col: TableColumn, path: str, first_row: int, arr: Any
) -> tuple[NDArray[Any], Any, Any]:
    """``(values (rows, width), valid, holes)`` of a span of a column of ``col.shape`` (a
    ``datasets`` ArrayND feature, or ``shapes=``'s): its
    nested lists, each row's lengths checked against ``col.shape`` at every level (a
    row of another shape would shift every row after it); a view of the file's values
    unless the span has null rows (refused when read: zeros hold their place)."""
    if isinstance(arr.type, pa.BaseExtensionType):
        arr = arr.storage
    arr.validate()
    valid = None
    rows = np.arange(len(arr))
    if arr.null_count:
        valid = valid_rows(arr)
        rows = np.flatnonzero(valid)
        arr = arr.filter(arr.is_valid())
    level, per = arr, 1  # per: items of this level a row holds
    for dim in col.shape:
        if level.null_count:
            at = int(np.flatnonzero(~valid_rows(level))[0])
            raise FormatError(
                f"{path}: column {col.name!r}: row {first_row + int(rows[at // per])} has null "
                f"list items; expected shape {list(col.shape)}"
            )
        if not pa.types.is_fixed_size_list(level.type):  # (a fixed size's: checked at open)
            offsets = numbers(level.offsets, zero_copy_only=True)
            lengths = np.diff(offsets)
            bad = np.flatnonzero(lengths != dim)
            if bad.size:
                i = int(bad[0])
                raise FormatError(
                    f"{path}: column {col.name!r}: row {first_row + int(rows[i // per])} does "
                    f"not have the column's shape {list(col.shape)}: a list of "
                    f"{int(lengths[i])} where {dim} belong ({bad.size} such lists in rows "
                    f"[{first_row}, {first_row + len(rows)}))"
                )
        level = level.flatten()
        per *= dim
    holes = None
    if level.null_count:
        # Null numbers (each list of the right length): zeros hold their places, and only
        # the rows holding them are refused when read (item_check), not the whole span.
        nulls = np.flatnonzero(~valid_rows(level))
        holes = np.zeros(len(rows) if valid is None else valid.size, dtype=bool)
        holes[rows[np.unique(nulls // per)]] = True
    values = zero_filled(level).reshape(len(rows), col.width)
    if valid is None:
        return values, None, holes
    dense = np.zeros((valid.size, col.width), dtype=values.dtype)
    dense[rows] = values
    return dense, valid, holes


def gather(
    parts: Sequence[Any],
    spans: Spans,
    col: TableColumn,
    n: int,
    groups: Groups,
    views: Views,
    fill: FillPolicy | None = None,
) -> NDArray[Any] | Ragged:
    """Column ``col`` of ``n`` rows: ``groups`` are ``(span, positions in the output,
    rows in the span)``, ``views`` each span's :func:`column_view`; ``fill``: lists'
    values pages filled first (counted there)."""
    name = col.name
    if col.kind in ("scalar", "fixed"):
        shape = (n,) if col.kind == "scalar" else (n, col.width)
        dense = np.empty(shape, dtype=col.dtype)
        for s, pos, loc in groups:
            arr, valid, holes = views[s][name]
            null_check(parts, spans, name, s, valid, loc)
            item_check(parts, spans, name, s, holes, loc)
            dense[pos] = arr[loc]
        return dense.reshape(n, *col.shape) if col.shape else dense
    starts = np.empty(n, dtype=np.int64)
    lengths = np.empty(n, dtype=np.int64)
    limits = np.empty(n, dtype=np.int64)
    for s, pos, loc in groups:
        items, offs, valid, holes = views[s][name]
        null_check(parts, spans, name, s, valid, loc)
        item_check(parts, spans, name, s, holes, loc)
        starts[pos] = offs[loc]
        lengths[pos] = offs[loc + 1] - starts[pos]
        limits[pos] = items.size
    # A mapped file's offsets are read as they are on disk (pyarrow checks none of
    # them): damaged ones must not cut rows from the wrong items (a negative start
    # would index from the end). One check for all rows (~9 us for 32 groups).
    bad = (lengths < 0) | (starts < 0) | (starts + lengths > limits)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        _corrupt_offsets(parts, spans, name, i, groups, (starts[i], lengths[i], limits[i]))
    if fill is not None:
        items_at = (
            (s, views[s][name][0].ctypes.data + starts[pos] * isz, lengths[pos] * isz)
            for s, pos, _ in groups
            if mapped(parts[int(spans.part[s])])
            for isz in [views[s][name][0].itemsize]
        )
        fill_maps(parts, spans, items_at, fill)
    out_off = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=out_off[1:])
    total = int(out_off[-1])
    values = np.empty(total, dtype=col.dtype)
    for s, pos, _ in groups:
        src = views[s][name][0]
        st, ln, dst = starts[pos], lengths[pos], out_off[pos]
        k = int(ln.sum())
        if k == 0:
            continue
        if k >= _LONG_ROW * pos.size:
            for a, b, d in zip(st.tolist(), ln.tolist(), dst.tolist(), strict=True):
                values[d : d + b] = src[a : a + b]
        else:
            # Short rows: one fancy-indexed copy for the whole group.
            shift = np.repeat(np.cumsum(ln) - ln, ln)
            step = np.arange(k, dtype=np.int64) - shift
            values[np.repeat(dst, ln) + step] = src[np.repeat(st, ln) + step]
    return Ragged(values=values, offsets=out_off)


def _corrupt_offsets(
    parts: Sequence[Any],
    spans: Spans,
    name: str,
    i: int,
    groups: Groups,
    found: tuple[Any, Any, Any],
) -> None:
    """Raise for output row ``i`` of column ``name``, whose list offsets are corrupt:
    ``found`` is its (start, length, items of its record batch)."""
    s, pos, loc = next(g for g in groups if i in g[1])
    row = int(spans.starts[s] + loc[int(np.flatnonzero(pos == i)[0])])
    start, length, items = (int(x) for x in found)
    raise FormatError(
        f"{parts[int(spans.part[s])].path}: column {name!r}: row {row} spans "
        f"items [{start}, {start + length}) of {items}: corrupt list offsets (expected "
        "them to rise, within the items)"
    )
