"""A :class:`~headrace.formats._tables.Table`'s rows gathered: each span's columns as
NumPy views (:func:`column_view`), and the rows a read asks for copied out of them in
bulk, per span (:func:`gather`), into one array or :class:`Ragged` per column."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from headrace.errors import FormatError
from headrace.formats._arrow_numpy import lists, numbers, valid_rows, zero_filled
from headrace.formats._map_fill import FillPolicy
from headrace.formats._ragged import Nested, Ragged
from headrace.formats._table_fill import fill_maps, mapped
from headrace.formats._table_nulls import Misshapen, item_check, null_check, null_item_rows
from headrace.formats._table_schema import VIEWS, TableColumn
from headrace.formats._table_spans import Groups, Spans, Views

__all__ = ["column_view", "gather"]

# Above this mean row length a per-row slice copy beats building index arrays, and so
# it does for a group of at most _FEW_ROWS rows whatever their length (a slice copy
# costs ~0.6 us a row, the index arrays ~14 us a group: 2c, 2026-12-05).
_LONG_ROW = 32
_FEW_ROWS = 16


def column_view(pa: Any, col: TableColumn, path: str, where: str, arr: Any) -> tuple[Any, ...]:
    """NumPy views of column ``col`` of one span (``where``: its row group or record
    batch and rows, for messages) of the file ``path``: ``(values, valid, holes)`` for
    numbers and fixed-size lists, ``(values, offsets, valid, holes)`` for lists and
    strings; ``valid`` is ``None`` without null rows, ``holes`` (which rows hold null
    list items, their places zeros in ``values``; a column of a fixed shape's:
    :class:`~headrace.formats._table_nulls.Misshapen`) without such rows."""
    name = col.name
    try:
        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks()
        if pa.types.is_dictionary(arr.type):
            # Its dictionary checked against its buffers first: a local file is mapped as
            # it is, and a damaged one's made the decode read outside them (a segfault,
            # until 2026-12-07). Indices past the dictionary the decode itself refuses.
            arr.validate()
            arr = arr.dictionary_decode()  # a copy of this span's values, nulls kept
        if isinstance(arr.type, pa.BaseExtensionType) and not (col.shape or col.item_shape):
            arr = arr.storage  # (pa.json_(), pa.uuid(): read as the values they hold)
        arr = lists(pa, arr)  # list views: their rows copied into a list, in row order
        # A local Arrow file is mapped and read without a copy: its lengths are the
        # file's own, and a damaged one (a list's values of negative length) made
        # NumPy read outside a buffer: a segfault. validate() checks lengths against
        # buffer sizes, with no pass over the data. A list's offsets are left to the
        # checks where rows are cut (gather), which name the row.
        if col.shape:
            return _array_view(pa, col, arr)
        if col.item_shape:
            return _items_view(pa, col, arr)
        if col.kind == "nested":
            return _lists_view(arr)
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


def _array_view(pa: Any, col: TableColumn, arr: Any) -> tuple[NDArray[Any], Any, Any]:
    """``(values (rows, width), valid, holes)`` of a span of a column of ``col.shape`` (a
    ``datasets`` ArrayND feature, or ``shapes=``'s): its nested lists, each row's
    lengths checked against ``col.shape`` at every level. A view of the file's values
    when every row has the shape and none is null; else a copy with zeros in the places
    of null rows (refused when read, :func:`null_check`) and of rows of another shape
    or holding null numbers (``holes``, a :class:`Misshapen`: refused when read, naming
    them, :func:`item_check`); the span's other rows read as usual."""
    tensor = getattr(arr.type, "extension_name", None) == "arrow.fixed_shape_tensor"
    if isinstance(arr.type, pa.BaseExtensionType):
        arr = arr.storage
    arr.validate()
    n = len(arr)
    valid = valid_rows(arr) if arr.null_count else None
    if tensor:  # (pa.fixed_shape_tensor) each row's numbers in one list, row-major
        k = col.width
        items = arr.values.slice(arr.offset * k, n * k)
        holes = _holes(null_item_rows(arr, k), n) if items.null_count else None
        return zero_filled(items).reshape(n, k), valid, holes
    # Where each row's entries start in the current level (the rows themselves at first),
    # counted from the level's first; a row of another shape is marked where found.
    starts = np.arange(n, dtype=np.int64)
    found = np.zeros(n, dtype=np.int64)  # a misshapen row's list length ...
    expected = np.zeros(n, dtype=np.int64)  # ... and the length its level's dimension wants
    bad = np.zeros(n, dtype=bool) if valid is None else ~valid  # (null rows: not shaped)
    level = arr
    for dim in col.shape:
        if pa.types.is_fixed_size_list(level.type):  # (its size checked at open)
            offsets = np.arange(len(level) + 1, dtype=np.int64) * dim
            child = level.values.slice(level.offset * dim, len(level) * dim)
        else:
            raw = numbers(level.offsets, zero_copy_only=True).astype(np.int64)
            offsets = raw - raw[0]
            child = level.values.slice(int(raw[0]), int(raw[-1] - raw[0]))
        lengths = np.diff(offsets)
        if lengths.size and int(lengths.min()) < 0:
            raise ValueError("a list of negative length")  # damaged offsets
        if level is not arr and level.null_count:  # a null list inside a row: length -1
            lengths = np.where(valid_rows(level), lengths, -1)
        wrong = lengths != dim
        if wrong.any():
            entries = np.flatnonzero(wrong)
            rows = np.searchsorted(starts, entries, side="right") - 1
            rows, first = np.unique(rows, return_index=True)
            new = rows[~bad[rows]]
            at = entries[first][~bad[rows]]
            found[new], expected[new] = lengths[at], dim
            bad[new] = True
        starts = offsets[starts]
        level = child
    nulls = None
    if level.null_count:
        # Null numbers (in lists of the right length): zeros hold their places, and only
        # the rows holding them are refused when read, not the whole span.
        entries = np.flatnonzero(~valid_rows(level))
        nulls = np.zeros(n, dtype=bool)
        nulls[np.searchsorted(starts, entries, side="right") - 1] = True
        nulls &= ~bad
    flat = zero_filled(level)
    if not bad.any():
        values = flat.reshape(n, col.width)
    else:  # a copy: each row from where it starts, zeros for the others
        good = np.flatnonzero(~bad)
        values = np.zeros((n, col.width), dtype=flat.dtype)
        values[good] = flat[starts[good, None] + np.arange(col.width)]
    misshapen = bad if valid is None else bad & valid
    if not misshapen.any() and nulls is None:
        return values, valid, None
    return values, valid, Misshapen(col.shape, misshapen, found, expected, nulls)


def _items_view(pa: Any, col: TableColumn, arr: Any) -> tuple[Any, ...]:
    """``(values (items, *item_shape), offsets, valid, holes)`` of a span of a column of
    rows of items of ``col.item_shape`` (``shapes=(None, ...)``, or a ``datasets`` ArrayND
    feature whose first dimension is ``None``): the rows' offsets count items, and the
    items are read as a column of that shape (:func:`_array_view`), each checked. A row
    holding an item of another shape, a null item or null numbers is refused alone when
    read (``holes``, a :class:`Misshapen`), the span's other rows read as usual."""
    if isinstance(arr.type, pa.BaseExtensionType):
        arr = arr.storage
    arr.validate()
    n = len(arr)
    valid = valid_rows(arr) if arr.null_count else None
    raw = numbers(arr.offsets, zero_copy_only=True).astype(np.int64)
    offsets = raw - raw[0]
    lengths = np.diff(offsets)
    if lengths.size and int(lengths.min()) < 0:
        raise ValueError("a list of negative length")  # damaged offsets
    items = arr.values.slice(int(raw[0]), int(offsets[-1]))
    inner = replace(
        col, kind="fixed", shape=col.item_shape, width=int(np.prod(col.item_shape)), item_shape=()
    )
    flat, fine, holes = _array_view(pa, inner, items)
    values = flat.reshape(len(items), *col.item_shape)
    if fine is None and holes is None:
        return values, offsets, valid, None
    # An item's trouble is its row's: the row's first misshapen (or null) item is named.
    row_of = np.repeat(np.arange(n, dtype=np.int64), lengths)
    odd = np.zeros(len(items), dtype=bool) if fine is None else ~fine
    found = np.where(odd, -1, 0)
    expected = np.full(len(items), col.item_shape[0], dtype=np.int64)
    nulls = None
    if holes is not None:
        odd |= holes.bad
        found = np.where(holes.bad, holes.found, found)
        expected = np.where(holes.bad, holes.expected, expected)
        if holes.nulls is not None:
            nulls = np.zeros(n, dtype=bool)
            nulls[row_of[holes.nulls]] = True
    rows, first = np.unique(row_of[odd], return_index=True)
    bad = np.zeros(n, dtype=bool)
    bad[rows] = True
    row_found = np.zeros(n, dtype=np.int64)
    row_expected = np.zeros(n, dtype=np.int64)
    row_found[rows] = found[odd][first]
    row_expected[rows] = expected[odd][first]
    if valid is not None:
        bad &= valid
        nulls = None if nulls is None else nulls & valid
    if nulls is not None:
        nulls &= ~bad
    if not bad.any() and (nulls is None or not nulls.any()):
        return values, offsets, valid, None
    shape = (None, *col.item_shape)
    return values, offsets, valid, Misshapen(shape, bad, row_found, row_expected, nulls)


def _lists_view(arr: Any) -> tuple[Any, ...]:
    """``(values, lists, offsets, valid, holes)`` of a span of a column of rows of lists
    (``shapes=(None, None)``): row ``i``'s lists are ``offsets[i]`` to ``offsets[i + 1]``,
    list ``j`` is ``values[lists[j]:lists[j + 1]]``; ``holes``: the rows holding a null
    list or a null number (their places zeros), refused when read."""
    arr.validate()
    valid = valid_rows(arr) if arr.null_count else None
    raw = numbers(arr.offsets, zero_copy_only=True).astype(np.int64)
    inner = arr.values.slice(int(raw[0]), int(raw[-1] - raw[0]))
    inner.validate()  # (both levels' offsets span their values: checked, with their rise)
    raw_lists = numbers(inner.offsets, zero_copy_only=True).astype(np.int64)
    offsets, lists = raw - raw[0], raw_lists - raw_lists[0]
    if (np.diff(offsets) < 0).any() or (np.diff(lists) < 0).any():
        raise ValueError("a list of negative length")  # damaged offsets
    items = inner.values.slice(int(raw_lists[0]), int(lists[-1]))
    odd = np.zeros(len(inner), dtype=bool)  # lists that are null or hold null numbers
    if inner.null_count:
        odd |= ~valid_rows(inner)
    if items.null_count:
        odd[np.searchsorted(lists, np.flatnonzero(~valid_rows(items)), side="right") - 1] = True
    holes = None
    if odd.any():
        holes = np.zeros(len(arr), dtype=bool)
        holes[np.searchsorted(offsets, np.flatnonzero(odd), side="right") - 1] = True
        holes = _holes(np.flatnonzero(holes if valid is None else holes & valid), len(arr))
    return zero_filled(items), lists, offsets, valid, holes


def _gather_lists(
    parts: Sequence[Any], spans: Spans, col: TableColumn, n: int, groups: Groups, views: Views
) -> Nested:
    """Column ``col`` (rows of lists) of ``n`` rows, as :func:`gather`'s: each row's lists'
    values copied in one piece, their lengths taken from the offsets in one pass."""
    name = col.name
    counts = np.empty(n, dtype=np.int64)  # each row's lists
    ends: list[Any] = [None] * n  # each row's lists' offsets, ends[p][0] its start
    pieces: list[Any] = [None] * n
    for s, pos, loc in groups:
        values, lists, offs, valid, holes = views[s][name]
        null_check(parts, spans, name, s, valid, loc)
        item_check(parts, spans, name, s, holes, loc)
        a, b = offs[loc], offs[loc + 1]  # (checked to rise within bounds: _lists_view)
        counts[pos] = b - a
        va, vb = lists[a], lists[b]
        rows = zip(pos.tolist(), a.tolist(), b.tolist(), va.tolist(), vb.tolist(), strict=True)
        for p, i, k, x, y in rows:
            ends[p], pieces[p] = lists[i : k + 1], values[x:y]
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    if not n:
        return Nested(values=np.empty(0, col.dtype), lists=np.zeros(1, np.int64), offsets=offsets)
    # The lists' lengths: differences within each row's run of offsets, none across rows.
    bounds = np.concatenate(ends).astype(np.int64)
    steps = np.diff(bounds)
    keep = np.ones(steps.size, dtype=bool)
    keep[np.cumsum(counts + 1)[:-1] - 1] = False
    lists_out = np.zeros(int(offsets[-1]) + 1, dtype=np.int64)
    np.cumsum(steps[keep], out=lists_out[1:])
    return Nested(values=np.concatenate(pieces), lists=lists_out, offsets=offsets)


def gather(
    parts: Sequence[Any],
    spans: Spans,
    col: TableColumn,
    n: int,
    groups: Groups,
    views: Views,
    fill: FillPolicy | None = None,
) -> NDArray[Any] | Ragged | Nested:
    """Column ``col`` of ``n`` rows: ``groups`` are ``(span, positions in the output,
    rows in the span)``, ``views`` each span's :func:`column_view`; ``fill``: lists'
    values pages filled first (counted there)."""
    name = col.name
    if col.kind == "nested":
        return _gather_lists(parts, spans, col, n, groups, views)
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
    ends = np.empty(n, dtype=np.int64)
    limits = np.empty(n, dtype=np.int64)
    for s, pos, loc in groups:
        items, offs, valid, holes = views[s][name]
        null_check(parts, spans, name, s, valid, loc)
        item_check(parts, spans, name, s, holes, loc)
        if pos.size <= _FEW_ROWS:  # a row at a time: ~0.4 us a row, 4 us a group so
            for p, r in zip(pos.tolist(), loc.tolist(), strict=True):
                starts[p], ends[p], limits[p] = offs[r], offs[r + 1], len(items)
        else:
            starts[pos] = offs[loc]
            ends[pos] = offs[loc + 1]
            limits[pos] = len(items)
    lengths = ends - starts
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
            for isz in [views[s][name][0].strides[0]]  # an item's bytes
        )
        fill_maps(parts, spans, items_at, fill)
    out_off = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=out_off[1:])
    total = int(out_off[-1])
    values = np.empty((total, *col.item_shape), dtype=col.dtype)
    first, last, into = starts.tolist(), ends.tolist(), out_off.tolist()
    for s, pos, _ in groups:
        src = views[s][name][0]
        if pos.size <= _FEW_ROWS:
            for i in pos.tolist():
                values[into[i] : into[i + 1]] = src[first[i] : last[i]]
            continue
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
