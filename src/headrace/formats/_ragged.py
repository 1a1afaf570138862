"""Variable-length rows as one flat values array plus row offsets."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from headrace.errors import ConfigError

__all__ = ["Nested", "Ragged"]


def check_pad_value(pad_value: int | float | bool, dtype: np.dtype[Any]) -> None:
    """Raise :class:`ConfigError` unless ``pad_value`` survives a cast to ``dtype``."""
    if isinstance(pad_value, bool | np.bool_) and dtype.kind != "b":
        # True passes the cast as 1, as PaddedRows' pad_id=True would: padding that is a
        # token id nobody asked for.
        raise ConfigError(
            f"pad_value {pad_value!r} is a bool, for values of dtype {dtype}; give a number "
            f"(e.g. {int(pad_value)})"
        )
    try:
        with np.errstate(over="ignore", invalid="ignore"):
            cast = np.array(pad_value).astype(dtype)
    except (OverflowError, ValueError, TypeError) as exc:
        raise ConfigError(f"pad_value {pad_value!r} does not fit dtype {dtype}") from exc
    got = cast.item()
    if number_kind(dtype) in "fc" and isinstance(pad_value, (float, np.floating)):
        # A float dtype rounds a float (0.1 in float32 is fine) and NaN != NaN;
        # what does not fit is a finite value that overflows to inf. An int
        # must come through exactly (2**24 + 1 in float32 does not). (bfloat16 and
        # float8 too: 0.1 was refused, and NaN; float4_e2m1fn makes inf 6.)
        if bool(np.isfinite(pad_value)):
            fits = bool(np.isfinite(got))
        else:
            fits = got == pad_value or (bool(np.isnan(got)) and bool(np.isnan(pad_value)))
    else:
        fits = got == pad_value
    if not fits:
        raise ConfigError(f"pad_value {pad_value!r} does not fit dtype {dtype} (becomes {cast})")


def number_dtype(dt: np.dtype[Any]) -> bool:
    """A dtype of numbers (ml_dtypes' bfloat16 and float8 are of kind "V" too, not
    records or raw bytes)."""
    if dt.kind in "OMmUSc":
        return False
    return dt.kind != "V" or not (dt.names or dt.type is np.void)


def ml_dtype(dt: np.dtype[Any]) -> bool:
    """An ml_dtypes number dtype (bfloat16, float8, int4): of kind "V", as records and raw
    bytes are, but numbers NumPy casts to and from."""
    return dt.kind == "V" and number_dtype(dt)


def number_kind(dt: np.dtype[Any]) -> str:
    """``dt``'s kind, an ml_dtypes one's as the numbers it holds: "f" for bfloat16 and
    float8 (``np.finfo`` knows them), "i" or "u" for int4 and the like."""
    if not ml_dtype(dt):
        return dt.kind
    try:
        np.finfo(dt)
    except ValueError:
        return "i" if int_bounds(dt)[0] < 0 else "u"
    return "f"


def int_bounds(dt: np.dtype[Any]) -> tuple[int, int]:
    """The least and greatest value of an integer dtype, ml_dtypes' (int4, which
    ``np.iinfo`` refuses) too: the integers that come back unchanged from it."""
    if not ml_dtype(dt):
        info = np.iinfo(dt)
        return int(info.min), int(info.max)
    span = np.arange(-(2 ** (8 * dt.itemsize)), 2 ** (8 * dt.itemsize), dtype=np.int64)
    with np.errstate(over="ignore", invalid="ignore"):
        kept = span[span.astype(dt).astype(np.int64) == span]
    return int(kept.min()), int(kept.max())


def numbers(a: NDArray[Any]) -> bool:
    """An unmasked array of numbers."""
    return not isinstance(a, np.ma.MaskedArray) and number_dtype(a.dtype)


def first_masked(mask: Any) -> int | None:
    """The first item (along the first axis) of which a masked array's ``mask``
    (``np.ma.getmask``) masks any part; ``None``: none, or no mask (``nomask``; a record
    array's mask is of records, whose dtype is refused with its values')."""
    if not isinstance(mask, np.ndarray) or mask.dtype.names or not mask.any():
        return None
    by_item = mask.reshape(len(mask), -1) if mask.ndim else mask.reshape(1, 1)
    return int(np.flatnonzero(by_item.any(axis=1))[0])


def no_numbers(dt: np.dtype[Any], name: str) -> str:
    """What to do with ``name`` (an array of ``dt``, which holds no numbers to pad: dates,
    strings, records, complex) rather than have a cast parse, drop or reinterpret it."""
    if dt.kind in "Mm":
        unit = "datetime64" if dt.kind == "M" else "timedelta64"
        counts = f"{name}.astype('{unit}[ms]').view(np.int64)"
        return f"pad their counts in one unit for every row ({counts})"
    if dt.kind in "US":
        return (
            f"its strings are not parsed: convert them ({name}.astype(np.int64)) or tokenize them"
        )
    if dt.kind == "c":
        return "pad its .real and .imag apart"
    if dt.names:
        return f"pad one field ({name}[{dt.names[0]!r}])"
    return "pad an array of numbers"


def padded_values(
    values: NDArray[Any], spans: NDArray[np.int64], who: str, rows: NDArray[np.int64] | None = None
) -> NDArray[Any]:
    """``values`` as ``who`` pads them, checked as :func:`headrace.collate.pad_batch`
    checks rows: a masked array's data, refused where an item inside ``spans`` (rows'
    offsets; lists' for a :class:`Nested`, whose ``rows`` are its offsets) is masked
    (padding would make it a real one); values of no numbers (dates, strings, records,
    complex, Python objects) refused, where padding would cast, drop or reinterpret them."""
    if numbers(values):
        return values
    if isinstance(values, np.ma.MaskedArray):
        lo, mask = int(spans[0]), np.ma.getmask(values)
        k = first_masked(mask[lo : int(spans[-1])]) if isinstance(mask, np.ndarray) else None
        if k is not None:
            at = lo + k
            j = int(np.searchsorted(spans, at, side="right")) - 1
            where = f"row {j}"
            if rows is not None:
                i = int(np.searchsorted(rows, j, side="right")) - 1
                where = f"row {i}'s list {j - int(rows[i])}"
            raise ConfigError(
                f"{who}: {where}'s item {at - int(spans[j])} is masked (values is a masked "
                "array); padding makes every item real (its mask marks padding, not masked "
                "items): fill them (values.filled(value)) or leave them out of the rows"
            )
        values = np.ma.getdata(values)
    dt = values.dtype
    if number_dtype(dt):
        return values
    if dt.hasobject:
        how = (
            "its items are Python objects: give values an array of numbers "
            "(np.asarray(values, dtype=...)), or pad the rows with "
            "headrace.collate.pad_batch, which checks each item"
        )
    else:
        how = no_numbers(dt, "values")
    raise ConfigError(f"{who}: values of dtype {dt} hold no numbers to pad; {how}")


def check_width(width: object, least: int = 0) -> int:
    """``width`` as an int: a Python or NumPy integer of at least ``least`` (a width taken
    from ``lengths.max()`` is a NumPy one); a bool, a float or less raises ``ValueError``."""
    if isinstance(width, bool | np.bool_) or not isinstance(width, int | np.integer):
        raise ValueError(f"must be an integer >= {least} (got {width!r}, a {type(width).__name__})")
    if width < least:
        raise ValueError(f"must be an integer >= {least} (got {width!r})")
    return int(width)


def check_side_and_width(side: str, width: object) -> int | None:
    """``width`` as an int (or None) once ``side`` and ``width`` are checked."""
    if side not in ("right", "left"):
        raise ConfigError(f"side must be 'right' or 'left' (got {side!r})")
    if width is None:
        return None
    try:
        return check_width(width)
    except ValueError as exc:
        raise ConfigError(f"width must be None or {str(exc).removeprefix('must be ')}") from exc


def _row_index(i: int, n: int) -> int:
    """Row ``i`` of ``n`` as an index in ``[0, n)`` (a negative one counts from the end)."""
    if not -n <= i < n:
        raise IndexError(f"row {i} out of range for {n} rows")
    return int(i) % n


@dataclass(frozen=True, slots=True, kw_only=True)
class Ragged:
    """Rows of different lengths: row ``i`` is ``values[offsets[i]:offsets[i + 1]]``.

    ``offsets`` has one more entry than there are rows and never decreases;
    ``offsets[0]`` need not be 0 (a slice of a larger buffer keeps its
    offsets). They are int64, or int32 (Arrow's ``list`` offsets), which are widened to
    int64. This is how tables hand token lists to :func:`headrace.collate.pad_batch`
    without building one Python object per row. ``values`` of more than one dimension
    hold items of a shape (a row of boxes: ``values`` of shape ``(N, 4)``), counted by
    ``offsets`` along the first axis and padded as whole items.
    """

    values: NDArray[np.generic]
    offsets: NDArray[np.int64]

    def __post_init__(self) -> None:
        if self.values.ndim < 1:
            raise ConfigError("Ragged values must be an array of at least one dimension")
        if self.offsets.ndim != 1 or self.offsets.size < 1:
            raise ConfigError(
                f"Ragged offsets must be 1-D with at least one entry (got shape "
                f"{self.offsets.shape})"
            )
        if self.offsets.dtype == np.int32:  # Arrow's list offsets: widened, losing nothing
            object.__setattr__(self, "offsets", self.offsets.astype(np.int64))
        if self.offsets.dtype != np.int64:
            raise ConfigError(
                f"Ragged offsets must be int64 (or int32) (got {self.offsets.dtype}): pass "
                "offsets.astype(np.int64)"
            )
        first, last = int(self.offsets[0]), int(self.offsets[-1])
        if first < 0 or last > len(self.values):
            raise ConfigError(
                f"Ragged offsets span [{first}, {last}) but values has {len(self.values)} items"
            )
        if self.offsets.size > 1 and bool((np.diff(self.offsets) < 0).any()):
            raise ConfigError("Ragged offsets must never decrease")

    def __len__(self) -> int:
        return int(self.offsets.size) - 1

    @property
    def lengths(self) -> NDArray[np.int64]:
        """Length of every row."""
        return np.diff(self.offsets)

    def pad(
        self,
        width: int | None,
        *,
        side: str = "right",
        pad_value: int | float | bool = 0,
        truncate: bool = False,
    ) -> tuple[NDArray[Any], NDArray[np.bool_]]:
        """A ``(rows, width, *item shape)`` array and its ``(rows, width)`` mask: one
        allocation each, no per-row loop. The values' dtype in native byte order, as
        :func:`headrace.collate.pad_batch` gives (``>u2``, which torch refuses, was kept).
        ``width=None``: the longest row's, as pad_batch takes it (was a TypeError). Values
        are checked as pad_batch checks rows (:func:`padded_values`): a masked item, or
        values of no numbers (dates, strings, records, complex, Python objects), raise
        :class:`ConfigError` saying what to do; a date's counts pad (``values.view(np.int64)``,
        as TableSource pads lists of timestamps)."""
        checked = check_side_and_width(side, width)  # a NumPy integer too
        width = int(self.lengths.max(initial=0)) if checked is None else checked
        values = padded_values(self.values, self.offsets, "Ragged.pad")
        check_pad_value(pad_value, values.dtype)
        native = values.dtype.newbyteorder("=")
        out = np.full((len(self), width, *values.shape[1:]), pad_value, native)
        mask = np.empty((len(self), width), dtype=np.bool_)
        Ragged.fill(values, self.offsets, out, mask, left=side == "left", truncate=truncate)
        return out, mask

    def row(self, i: int) -> NDArray[np.generic]:
        """Row ``i`` as a view of ``values``."""
        i = _row_index(i, len(self))
        return self.values[int(self.offsets[i]) : int(self.offsets[i + 1])]

    @staticmethod
    def too_long(lengths: NDArray[np.int64], width: int) -> ConfigError:
        row = int(np.flatnonzero(lengths > width)[0])
        return ConfigError(
            f"row {row} has {int(lengths[row])} items, more than width={width}; "
            "pass truncate=True to keep its first width items"
        )

    @staticmethod
    def fill(
        values: NDArray[Any],
        offsets: NDArray[np.int64],
        out: NDArray[Any],
        mask: NDArray[np.bool_],
        *,
        left: bool,
        truncate: bool,
    ) -> None:
        """Fill ``out`` and ``mask`` from ``values`` (items along its first axis, as in
        ``out``'s second) with no per-row Python loop."""
        width = out.shape[1]
        lengths = np.diff(offsets)
        kept = np.minimum(lengths, width)
        cols = np.arange(width, dtype=np.int64)
        if left:
            np.greater_equal(cols, (width - kept)[:, None], out=mask)
        else:
            np.less(cols, kept[:, None], out=mask)
        # Boolean assignment walks ``out`` in row-major order, which is the order
        # of the concatenated rows: one vectorised scatter for the whole batch.
        if bool((kept == lengths).all()):
            out[mask] = values[int(offsets[0]) : int(offsets[-1])]
            return
        if not truncate:
            raise Ragged.too_long(lengths, width)
        total = int(kept.sum())
        step = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(kept) - kept, kept)
        out[mask] = values[np.repeat(offsets[:-1], kept) + step]


def _check_offsets(name: str, a: Any, n: int, what: str, *, exact: bool = True) -> None:
    """``Nested``'s offsets ``a`` (``name``) are 1-D int64, start at 0, never decrease and
    end at ``n`` (within ``n`` unless ``exact``); ``what`` names ``n``'s meaning."""
    shape = np.shape(a)
    if len(shape) != 1 or shape[0] < 1:
        raise ConfigError(f"Nested {name} must be 1-D with at least one entry (got shape {shape})")
    if getattr(a, "dtype", None) != np.int64:  # (a list has none)
        raise ConfigError(f"Nested {name} must be int64 (got {getattr(a, 'dtype', a)!s})")
    first, last = int(a[0]), int(a[-1])
    if first != 0:
        raise ConfigError(f"Nested {name} must start at 0 (got {first})")
    if bool((np.diff(a) < 0).any()):
        raise ConfigError(f"Nested {name} must never decrease")
    if last > n or (exact and last != n):
        raise ConfigError(f"Nested {name} span [0, {last}) but {what.format(n)}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Nested:
    """Rows of lists of different lengths (a row of token lists: several negatives):
    row ``i`` holds lists ``offsets[i]`` to ``offsets[i + 1]`` of ``lists``, list ``j``
    being ``values[lists[j]:lists[j + 1]]``. Both offset arrays start at 0."""

    values: NDArray[np.generic]
    lists: NDArray[np.int64]
    offsets: NDArray[np.int64]

    def __post_init__(self) -> None:
        # As Ragged checks its offsets: pad and row index with these, and offsets that do
        # not fit failed there with NumPy's IndexError or broadcast errors, or read nothing.
        if np.ndim(self.values) != 1:
            raise ConfigError(f"Nested values must be 1-D (got shape {np.shape(self.values)})")
        _check_offsets("lists", self.lists, len(self.values), "values has {} items", exact=False)
        _check_offsets("offsets", self.offsets, self.lists.size - 1, "lists has {} lists")

    def __len__(self) -> int:
        return int(self.offsets.size) - 1

    def row(self, i: int) -> list[NDArray[np.generic]]:
        """Row ``i``'s lists, as views of ``values``."""
        i = _row_index(i, len(self))  # -1 read lists offsets[-1] to offsets[0]: none
        a, b = int(self.offsets[i]), int(self.offsets[i + 1])
        return [self.values[int(self.lists[j]) : int(self.lists[j + 1])] for j in range(a, b)]

    def overflow(self, widths: tuple[int, int]) -> tuple[int, str] | None:
        """The first row with more lists than ``widths[0]``, or a list of more items than
        ``widths[1]``, and what it has (``None``: none)."""
        counts = np.diff(self.offsets)
        if (counts > widths[0]).any():
            i = int(np.flatnonzero(counts > widths[0])[0])
            return i, f"has {int(counts[i])} lists, more than {widths[0]}"
        sizes = np.diff(self.lists)
        if (sizes > widths[1]).any():
            j = int(np.flatnonzero(sizes > widths[1])[0])
            i = int(np.searchsorted(self.offsets, j, side="right")) - 1
            return i, (
                f"has a list of {int(sizes[j])} items (list {j - int(self.offsets[i])}), more "
                f"than {widths[1]}"
            )
        return None

    def pad(
        self, widths: tuple[int, int], *, pad_value: int | float | bool = 0, truncate: bool = False
    ) -> tuple[NDArray[Any], NDArray[np.bool_]]:
        """``(rows, lists, items)`` values and mask, each row's lists padded to
        ``widths[0]`` and each list's items to ``widths[1]`` on the right; a row of more
        lists, or a list of more items, raises :class:`ConfigError` naming it, unless
        ``truncate`` (its first ones kept). One allocation each, no per-row loop."""
        values = padded_values(self.values, self.lists, "Nested.pad", self.offsets)
        check_pad_value(pad_value, values.dtype)
        if not isinstance(widths, tuple | list) or len(widths) != 2:
            raise ConfigError(f"widths must be a pair (lists, items) of integers (got {widths!r})")
        got = []
        for k, w in enumerate(widths):  # -1 was numpy's "negative dimensions are not allowed"
            try:
                got.append(check_width(w))
            except ValueError as exc:
                raise ConfigError(f"widths[{k}] {exc}") from exc
        w1, w2 = got
        n = len(self)
        if not truncate and (over := self.overflow((w1, w2))) is not None:
            raise ConfigError(f"row {over[0]} {over[1]}; pass truncate=True to keep its first ones")
        counts = np.diff(self.offsets)
        sizes = np.diff(self.lists)
        row = np.repeat(np.arange(n, dtype=np.int64), counts)  # each list's row
        place = np.arange(sizes.size, dtype=np.int64) - np.repeat(self.offsets[:-1], counts)
        kept = place < w1
        keep = np.minimum(sizes, w2) * kept  # items kept of each list
        # Native, as Ragged.pad gives: torch.from_numpy refuses a big-endian ">i4".
        out = np.full((n, w1, w2), pad_value, dtype=values.dtype.newbyteorder("="))
        mask = np.zeros((n, w1, w2), dtype=np.bool_)
        mask[row[kept], place[kept]] = np.arange(w2) < keep[kept][:, None]
        # The mask walks out row-major: each kept list's first items, in order.
        step = np.arange(int(keep.sum()), dtype=np.int64) - np.repeat(np.cumsum(keep) - keep, keep)
        out[mask] = values[np.repeat(self.lists[:-1], keep) + step]
        return out, mask
