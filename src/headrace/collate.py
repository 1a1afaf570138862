"""Collation: pad variable-length rows into one ``(B, width)`` array and its mask.

``pad_batch`` takes the rows in any of the forms the pipeline meets them:
a :class:`~headrace.formats.Ragged` (flat values + offsets, as tables give
them), a list of NumPy arrays, a list of Python lists, or a list of torch
tensors. Lists and NumPy arrays may be mixed; torch tensors may not be mixed
with anything else (the output type would be ambiguous) and give torch
tensors back, sharing memory with the NumPy result (``torch.from_numpy``).

Each output is allocated exactly once, at its final shape, and filled in
place; outputs never share memory with inputs. The mask is ``bool``
(``True`` on real items); ``mask.view(np.uint8)`` is a free 0/1 view.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Sequence
from itertools import chain
from typing import Any, Literal, cast

import numpy as np
from numpy.typing import DTypeLike, NDArray

# Modules, not names: this module's public names are exactly its __all__.
from headrace import errors, formats
from headrace.formats import _ragged

__all__ = ["pad_batch"]


def _is_tensor(x: object) -> bool:
    # Checked by type name so that torch is imported only when a tensor is seen.
    return type(x).__module__.startswith("torch") and hasattr(x, "numpy")


def _numpy_dtype(dtype: Any) -> DTypeLike | None:
    """``dtype`` as NumPy takes it: a ``torch.dtype`` becomes its NumPy counterpart."""
    if not _is_torch_dtype(dtype):
        return cast("DTypeLike | None", dtype)
    import torch

    try:
        return torch.empty(0, dtype=dtype).numpy().dtype
    except TypeError as exc:  # bfloat16 and other dtypes NumPy has no counterpart for
        raise errors.ConfigError(
            f"dtype {dtype} has no NumPy counterpart to pad in ({exc})"
        ) from exc


def _is_torch_dtype(x: Any) -> bool:
    return type(x).__module__ == "torch" and type(x).__name__ == "dtype"


def _a(name: str) -> str:
    """``name`` with its article as said: "an int", "an ndarray", "a float", "a uint8"."""
    said_vowel = name[:1] in tuple("aeioAEIO") or name.startswith("nd")
    return f"{'an' if said_vowel else 'a'} {name}"


def _widened(a: NDArray[Any]) -> NDArray[Any]:
    """``a``, of an ml_dtypes dtype, in the narrowest NumPy dtype that holds each value
    exactly (bfloat16 and float8 in float32, int4 in int8), as tensor rows of bfloat16
    are: the checks of a cast to another dtype read NumPy's numbers. Others as they are."""
    if not _ragged.ml_dtype(a.dtype):
        return a
    for name in ("int8", "uint8", "int16", "uint16", "float32", "float64"):
        if np.can_cast(a.dtype, name, "safe"):
            return a.astype(name)
    return a


def pad_batch(
    seqs: formats.Ragged | Sequence[Any],
    *,
    side: Literal["right", "left"] = "right",
    width: int | None = None,
    pad_value: int | float | bool = 0,
    dtype: DTypeLike | None = None,
    return_mask: bool = True,
    truncate: bool = False,
) -> Any:
    """Pad rows to one ``(B, width)`` array; return ``(values, mask)`` or just ``values``.

    Rows of items of a shape (a :class:`~headrace.formats.Ragged` of values ``(N, 4)``,
    or NumPy arrays or tensors ``(n_i, 4)``: boxes) pad whole items, to ``(B, width,
    4)`` and a ``(B, width)`` mask; a row of no items among them may be ``(0,)`` (an
    image's boxes saved from an empty list) or ``[]``.

    ``side`` says where padding goes ("left" for decoder prompts).
    ``width=None`` pads to the longest row; an ``int`` fixes it, and a longer
    row raises :class:`ConfigError` naming it unless ``truncate=True``, which
    keeps each row's *first* ``width`` items whatever the side. ``dtype``
    defaults to the rows' (NumPy's result type across rows, in native byte order; inferred from
    the values for Python lists, the kept ones where truncating; never a float64 that rounds
    an integer:
    integer lists past int64 are uint64, other mixes raise :class:`DataError`);
    ``pad_value`` must fit it. A ``dtype`` that
    would change a value (overflow, a fraction into an integer or bool dtype,
    an integer a float dtype cannot hold exactly) raises :class:`DataError`
    naming the row, the value and the dtype; a float into a narrower float
    rounds to the nearest. An empty batch gives ``(0, width or 0)`` values and
    mask: torch tensors if ``dtype`` is a torch dtype (no rows say which), else
    NumPy arrays. Tensor rows of a float dtype NumPy lacks (``torch.bfloat16``)
    need ``dtype``; they are widened to float32 (exact) and then cast as above.
    Arrays (or a ``Ragged``) of an ml_dtypes dtype (``bfloat16``, ``float8_e4m3fn``,
    ``int4``) pad in it without ``dtype``, as ``Ragged.pad`` pads them; into another
    they are widened so too (int4 to int8) and checked as above, and ``dtype`` may be
    one of them (a float rounds; a value past its range, or an integer it cannot hold
    exactly, raises; tensor rows need a torch dtype, which torch.from_numpy takes).
    """
    if isinstance(seqs, formats.Nested):
        # Not iterable: list() of it raised a bare TypeError naming nothing.
        raise errors.ConfigError(
            "pad_batch pads rows of one level of items; a Nested holds rows of lists (a "
            "table's lists-of-lists column: several hard negatives a row) and pads at both "
            "levels with its own pad: nested.pad((lists, items), pad_value=0) gives "
            "(rows, lists, items) values and mask (right-padded; truncate=True keeps the "
            "first ones)"
        )
    width = _ragged.check_side_and_width(side, width)
    asked_torch = _is_torch_dtype(dtype)
    dtype = _numpy_dtype(dtype)
    torch_out = False
    rows: list[NDArray[Any]] | None = None
    if isinstance(seqs, formats.Ragged) and not _ragged.numbers(seqs.values):
        # Masked values, Python objects, or no numbers: row by row, as arrays are checked.
        seqs = [seqs.row(i) for i in range(len(seqs))]
    if isinstance(seqs, formats.Ragged):
        values, offsets = seqs.values, seqs.offsets
    else:
        seqs = list(seqs)
        values, offsets, rows, torch_out = _flatten(seqs, dtype, width if truncate else None)
        torch_out = torch_out or (asked_torch and not seqs)
    # The rows' dtype in native byte order, as NumPy stacks rows (a big-endian ``>u2``
    # Ragged came out ``>u2``, which torch.from_numpy refuses).
    out_dtype = np.dtype(dtype) if dtype is not None else values.dtype.newbyteorder("=")
    # None in a row, an int past int64: Python objects. (ml_dtypes' bfloat16 and float8
    # are numbers, as Ragged.pad pads them: until 2026-12-07 refused as "not numbers".)
    if _ragged.number_kind(out_dtype) not in "biuf":
        raise errors.DataError(
            f"pad_batch: the values make an array of {out_dtype} (not numbers NumPy can hold: "
            "a None, a string, an integer past 64 bits?); pass numbers, or dtype="
        )
    try:
        _ragged.check_pad_value(pad_value, out_dtype)
    except errors.ConfigError as exc:
        wider = None if dtype is not None else _pad_dtype(pad_value, out_dtype)
        if wider is None:
            raise
        # The rows chose the dtype (uint16 token ids padded with -100 labels): say how
        # to choose another.
        raise errors.ConfigError(
            f"{exc}, the rows' dtype; pass dtype= one that holds it (e.g. dtype=np.{wider})"
        ) from exc
    n = offsets.size - 1
    lengths = np.diff(offsets)
    w = int(lengths.max(initial=0)) if width is None else width
    if rows is not None:
        # Inferred, the rows' result type may be lossy too: int64 and uint64 make float64.
        if any(_ragged.ml_dtype(d) and d != out_dtype for d in {r.dtype for r in rows}):
            rows = [r if r.dtype == out_dtype else _widened(r) for r in rows]
        _check_rows(rows, out_dtype, w if truncate else None, inferred=dtype is None)
        out = np.full((n, w, *rows[0].shape[1:]), pad_value, dtype=out_dtype)
        mask = np.empty((n, w), dtype=np.bool_)
        _fill_rows(rows, lengths, out, mask, left=side == "left", truncate=truncate)
    else:
        if values.dtype != out_dtype and values.size:
            # Only the rows' own span is checked and cast: a Ragged may slice a
            # much larger buffer.
            start = int(offsets[0])
            values = values[start : int(offsets[-1])]
            if start:
                offsets = offsets - start
            values = _widened(values)
            _check_flat(values, offsets, out_dtype, w if truncate else None)
            # Checked: a value that does not fit is one truncation drops (a 1e6 score
            # for float16, NaN for int8), which NumPy warned of as it cast the rest.
            with np.errstate(over="ignore", invalid="ignore"):
                values = values.astype(out_dtype)
        out = np.full((n, w, *values.shape[1:]), pad_value, dtype=out_dtype)
        mask = np.empty((n, w), dtype=np.bool_)
        formats.Ragged.fill(values, offsets, out, mask, left=side == "left", truncate=truncate)
    if torch_out:
        import torch

        if _ragged.ml_dtype(out.dtype):  # torch.from_numpy knows NumPy's own dtypes only
            raise errors.ConfigError(
                f"pad_batch: dtype {out.dtype} (ml_dtypes) for torch tensor rows, which "
                "torch.from_numpy cannot take; pass a torch dtype (dtype=torch.float32), "
                "and cast the tensors after"
            )
        if return_mask:
            return torch.from_numpy(out), torch.from_numpy(mask)
        return torch.from_numpy(out)
    return (out, mask) if return_mask else out


def _pad_dtype(pad_value: int | float | bool, rows: np.dtype[Any]) -> str | None:
    """A dtype that holds ``pad_value`` and (checked at the cast) the rows' values, to
    suggest when the rows' own cannot hold the pad; ``None`` when none would help (a bool
    pad for number rows, which no dtype takes, or a pad that is no number)."""
    if isinstance(pad_value, bool | np.bool_):
        return None
    for name in ("int64", "uint64", "float32", "float64"):
        wide = np.dtype(name)
        if wide == rows or (wide.kind in "iu" and _ragged.number_kind(rows) == "f"):
            continue  # integers would refuse the rows' fractions
        # float32 only where it holds every row value (float16 rows); float64 for the
        # rest, whose values the cast then checks (an id past 2**53 is refused there).
        if name == "float32" and not _lossless(rows, wide):
            continue
        try:
            _ragged.check_pad_value(pad_value, wide)
        except errors.ConfigError:
            continue
        return name
    return None


def _lossless(src: np.dtype[Any], dst: np.dtype[Any]) -> bool:
    """Every value of ``src`` is unchanged by a cast to ``dst``.

    NumPy's "safe" casts, less integers into a float whose significand is
    narrower than them: NumPy counts int64 -> float64 as safe, but 2**53 + 1
    becomes 2**53.
    """
    if _ragged.ml_dtype(dst) and src != dst:
        # NumPy counts int8 -> float8_e4m3fn as safe, but 127 becomes 128.
        if src.kind == "b":
            return True  # 0 and 1: every number dtype holds them
        return src.kind in "iu" and _ragged.number_kind(dst) == "f" and _int_exact(src, dst)
    if not np.can_cast(src, dst, "safe"):
        return False
    if src.kind in "iu" and dst.kind in "fc":
        return _int_exact(src, dst)
    return True


def _int_exact(src: np.dtype[Any], dst: np.dtype[Any]) -> bool:
    """Every integer of ``src`` is one of the float ``dst``'s (its significand is wide enough)."""
    return bool(np.iinfo(src).bits - (src.kind == "i") <= np.finfo(dst).nmant + 1)


def _misfits(a: NDArray[Any], dtype: np.dtype[Any]) -> NDArray[np.bool_] | None:
    """Where 1-D ``a`` holds values that a cast to ``dtype`` would change; ``None`` when none can.

    Changed: a value out of the dtype's range (NaN and infinities included,
    for integer and bool dtypes), a fraction into an integer or bool dtype,
    an integer that a float dtype cannot hold exactly. A float into a
    narrower float rounds to the nearest (0.1 in float32 is fine) and keeps
    NaN and infinities; only overflow to an infinity counts there. Two
    reductions settle the usual case; the element-wise test runs only when
    they fail, or for floats into an integer dtype (fractions).
    """
    if (
        a.size == 0
        or a.dtype.kind not in "biuf"
        or _ragged.number_kind(dtype) not in "biuf"
        or _lossless(a.dtype, dtype)
    ):
        return None
    lowest, highest = a.min().item(), a.max().item()
    if _ragged.number_kind(dtype) == "f":
        if a.dtype.kind == "f":
            return _float_overflow(a, dtype, lowest, highest)
        return _inexact_ints(a, dtype, lowest, highest)
    # Half-open [lo, end): both bounds are 0 or powers of two, exact in any float.
    lo, end = _int_range(dtype)
    in_range = lo <= lowest and highest < end  # NaN fails both comparisons
    if a.dtype.kind != "f":
        return None if in_range else ~((a >= lo) & (a < end))
    # float16/32 widen exactly, so the bounds compare as float64 (as float16, 2**63 is inf).
    wide = a.astype(np.float64) if a.dtype.itemsize < 8 else a
    fraction: NDArray[np.bool_] = wide != np.trunc(wide)  # NaN != NaN: flagged too
    if in_range:
        return fraction
    with np.errstate(invalid="ignore"):
        out: NDArray[np.bool_] = fraction | ~((wide >= lo) & (wide < end))
    return out


def _int_range(dtype: np.dtype[Any]) -> tuple[int, int]:
    """``[lo, end)`` of an integer or bool ``dtype``'s values (int4's too)."""
    if dtype.kind == "b":
        return 0, 2
    lo, hi = _ragged.int_bounds(dtype)
    return lo, hi + 1


def _float_overflow(
    a: NDArray[Any], dtype: np.dtype[Any], lowest: float, highest: float
) -> NDArray[np.bool_] | None:
    """Finite floats that become infinities in the narrower float ``dtype``, or would
    (float8_e4m3fn has none: NaN; float4_e2m1fn keeps its largest, 6, for 1e6)."""
    info = np.finfo(dtype)
    top = float(info.max)
    if -top <= lowest and highest <= top:
        return None
    # Where rounding to nearest goes past the largest value: half its step above it.
    past = top + 2.0 ** (math.floor(math.log2(top)) - int(info.nmant)) / 2
    with np.errstate(over="ignore", invalid="ignore"):
        cast = a.astype(dtype)
        bad: NDArray[np.bool_] = np.isfinite(a) & (~np.isfinite(cast) | ~(np.abs(a) < past))
    return bad


def _inexact_ints(
    a: NDArray[Any], dtype: np.dtype[Any], lowest: int, highest: int
) -> NDArray[np.bool_] | None:
    """Integers that the float ``dtype`` rounds (past ``2**(nmant + 1)``) or overflows."""
    exact = 2 ** (np.finfo(dtype).nmant + 1)
    if -exact <= lowest and highest <= exact:
        return None
    with np.errstate(over="ignore"):
        f = a.astype(dtype).astype(np.float64)  # float16/32 widen exactly
    info = np.iinfo(a.dtype)
    # Back to integers where the float lies in the source's range; a value rounded
    # up past the top (2**63 from int64) or to inf has changed in any case.
    ok = (f >= float(info.min)) & (f < float(int(info.max) + 1))
    bad: NDArray[np.bool_] = ~ok | (np.where(ok, f, 0).astype(a.dtype) != a)
    return bad


def _misfit_error(
    row: int, value: Any, dtype: np.dtype[Any], *, inferred: bool = False
) -> errors.DataError:
    v = value.item() if isinstance(value, np.generic) else value
    fix = (
        "the rows' values have no common NumPy type that holds them all (integers past "
        "int64 beside negative ones or floats, or int64 beside uint64 rows); pass dtype="
        if inferred
        else "pass a dtype that holds it, or dtype=None to keep the rows' own"
    )
    return errors.DataError(
        f"row {row} holds {v!r}, which does not fit dtype {dtype}{_becomes(v, dtype)}; {fix}"
    )


def _becomes(v: Any, dtype: np.dtype[Any]) -> str:
    """`` (it would become X)`` for a value inside ``dtype``'s range that the cast changes."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v:  # v != v: NaN
        return ""
    if _ragged.number_kind(dtype) == "f":
        inside = abs(v) <= float(np.finfo(dtype).max)
    else:
        lo, end = _int_range(dtype)
        inside = lo <= v < end
    if not inside:
        return ""
    return f" (it would become {np.asarray(v).astype(dtype).item()!r})"


def _check_rows(
    rows: list[NDArray[Any]], dtype: np.dtype[Any], keep: int | None, *, inferred: bool = False
) -> None:
    """Separate row arrays fit ``dtype`` (their first ``keep`` items, when truncating).

    Rows of a dtype that casts losslessly are not looked at. The others are
    checked together: one concatenation and two reductions cost far less
    than two reductions per row.
    """
    dtypes = {r.dtype for r in rows}
    for d in dtypes:
        if _lossless(d, dtype):
            continue
        one = len(dtypes) == 1  # the usual case: no per-row selection
        idx = range(len(rows)) if one else [i for i, r in enumerate(rows) if r.dtype == d]
        parts = rows if one and keep is None else [rows[i][:keep] for i in idx]
        flat = np.concatenate(parts)
        bad = _misfits(flat, dtype)
        if bad is not None and bad.any():
            # By item (a number, or an item of a shape: a box), named by its first misfit.
            items, bad = flat.reshape(len(flat), -1), bad.reshape(len(flat), -1)
            j = int(np.flatnonzero(bad.any(axis=1))[0])
            ends = np.cumsum([len(p) for p in parts])
            row = idx[int(np.searchsorted(ends, j, side="right"))]
            raise _misfit_error(row, items[j][bad[j]][0], dtype, inferred=inferred)


def _check_flat(
    values: NDArray[Any], offsets: NDArray[np.int64], dtype: np.dtype[Any], keep: int | None
) -> None:
    """Flat rows (``offsets[0] == 0``) fit ``dtype``; items past ``keep`` in a row are
    dropped. Items of a shape (``values`` of more than one dimension) are named by their
    first number that does not fit."""
    bad = _misfits(values, dtype)
    if bad is not None:  # by item (a number, or an item of a shape: a box)
        items, bad = values.reshape(len(values), -1), bad.reshape(len(values), -1)
        _raise_first(
            np.asarray(bad.any(axis=1)), offsets, keep, lambda i: items[i][bad[i]][0], dtype
        )


def _raise_first(
    bad: NDArray[np.bool_],
    offsets: NDArray[np.int64],
    keep: int | None,
    item: Callable[[int], Any],
    dtype: np.dtype[Any],
    *,
    inferred: bool = False,
) -> None:
    """Raise for the first flat position in ``bad`` that truncation to ``keep`` keeps."""
    pos = np.flatnonzero(bad)
    rows = np.searchsorted(offsets, pos, side="right") - 1
    if keep is not None:
        kept = pos - offsets[rows] < keep
        pos, rows = pos[kept], rows[kept]
    if pos.size:
        raise _misfit_error(int(rows[0]), item(int(pos[0])), dtype, inferred=inferred)


def _fill_rows(
    rows: list[NDArray[Any]],
    lengths: NDArray[np.int64],
    out: NDArray[Any],
    mask: NDArray[np.bool_],
    *,
    left: bool,
    truncate: bool,
) -> None:
    """Copy separate row arrays straight into ``out``: one memcpy per row, no staging copy."""
    width = out.shape[1]
    kept = np.minimum(lengths, width)
    if not truncate and bool((kept != lengths).any()):
        raise formats.Ragged.too_long(lengths, width)
    cols = np.arange(width, dtype=np.int64)
    if left:
        np.greater_equal(cols, (width - kept)[:, None], out=mask)
        for i, (r, k) in enumerate(zip(rows, kept.tolist(), strict=True)):
            out[i, width - k :] = r[:k]
    else:
        np.less(cols, kept[:, None], out=mask)
        for i, (r, k) in enumerate(zip(rows, kept.tolist(), strict=True)):
            out[i, :k] = r[:k]


def _flatten(
    rows: list[Any], dtype: DTypeLike | None, keep: int | None
) -> tuple[NDArray[Any], NDArray[np.int64], list[NDArray[Any]] | None, bool]:
    """Python-list rows as flat values + offsets; NumPy/tensor rows as a list of arrays.

    Returns ``(values, offsets, arrays, from_torch)``: ``arrays`` is ``None``
    when the rows were flattened into ``values``; otherwise ``values`` is an
    empty array carrying the dtype. ``keep``: the items per row that
    truncation keeps (``None``: all).
    """
    is_tensor = [_is_tensor(r) for r in rows]
    from_torch = any(is_tensor)
    if from_torch:
        if not all(is_tensor):
            i = is_tensor.index(False)
            raise errors.ConfigError(
                f"row {i} is {_a(type(rows[i]).__name__)} but other rows are torch tensors; "
                "pass all rows as tensors or none"
            )
        rows = [_tensor_array(i, r, dtype) for i, r in enumerate(rows)]
    lists = False
    # The first array row that has items says their shape: an empty one (np.array([]),
    # an image's boxes saved from an empty list) has none to say it with.
    like = next((r for r in rows if isinstance(r, np.ndarray) and r.shape != (0,)), None)
    item = () if like is None else like.shape[1:]
    rows = list(rows)  # (empty rows become arrays of no items of that shape)
    for i, r in enumerate(rows):
        if type(r) is not np.ndarray and isinstance(r, np.ndarray):
            r = rows[i] = _plain_row(i, r)  # a masked array (its data, or refused)
        if isinstance(r, np.ndarray):
            if r.ndim == 0:
                # The shape check below would name the item shape () as the culprit.
                kind = "tensor" if from_torch else "array"
                raise errors.ConfigError(
                    f"row {i} is a 0-d {kind} (a scalar: {r.item()!r}); a row is a sequence "
                    "of items: wrap it ([x]), or pass a 1-D one (np.atleast_1d(x))"
                )
            # Rows of items of a shape (a row of boxes: (n, 4)) pad as whole items.
            if r.shape[1:] != item and r.shape == (0,):
                rows[i] = r.reshape(0, *item)  # no items: none of another shape
            elif r.shape[1:] != item:
                raise errors.ConfigError(
                    f"row {i} has shape {r.shape}; rows must be 1-D, or all of items of one "
                    f"shape (row {i}'s are {r.shape[1:]}, the first array row's {item})"
                )
        elif isinstance(r, (list, tuple)):
            if not r and like is not None and item:  # no boxes, beside rows of boxes
                rows[i] = np.empty((0, *item), like.dtype)
            else:
                lists = True
        else:
            raise errors.ConfigError(
                f"row {i} is {_a(type(r).__name__)}; expected a list, a 1-D NumPy array "
                "or a torch tensor"
            )
    lengths = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    default = np.dtype(dtype) if dtype is not None else np.dtype(np.int64)
    if not rows:
        return np.empty(0, dtype=default), offsets, None, False
    found = None
    if not lists:
        # One promotion says that every row holds numbers; where it does not, row by row:
        # refused, or Python objects, then checked as lists are.
        found = _numbers_type(rows)
        if found is None:
            rows = [_plain_row(i, r) for i, r in enumerate(rows)]
            lists = any(isinstance(r, list) for r in rows)
    if not lists:
        if dtype is not None:
            dt = np.dtype(dtype)
        else:  # (not `found or`: a dtype of no fields is falsy)
            dt = found if found is not None else np.result_type(*rows)
        return np.empty(0, dtype=dt), offsets, rows, from_torch
    # Arrays beside lists are flattened with them: one of strings would be parsed.
    rows = [_plain_row(i, r) if isinstance(r, np.ndarray) else r for i, r in enumerate(rows)]
    if item != ():
        # Flattened beside lists, such a row's items would be arrays among numbers.
        li = next(i for i, r in enumerate(rows) if not isinstance(r, np.ndarray))
        ai = next(i for i, r in enumerate(rows) if isinstance(r, np.ndarray))
        raise errors.ConfigError(
            f"row {li} is a list, but row {ai} is an array of items of shape {item}: rows "
            "of lists must be flat sequences of numbers; pass every row as an array (or "
            f"tensor) of items of shape {item}"
        )
    if keep is not None and dtype is None:
        # Inferred from the items truncation keeps, as a given dtype is checked against
        # them alone: a dropped 2.5 made the batch float64, and a dropped None refused it.
        rows = [r[:keep] for r in rows]
        np.cumsum(np.minimum(lengths, keep), out=offsets[1:])
    # Python lists (possibly mixed with arrays): one C-level pass over all
    # items, NumPy inferring the dtype unless given.
    flat = list(chain.from_iterable(rows))
    try:
        if not flat:
            values = np.empty(0, dtype=default)
        elif dtype is None:
            values = _inferred(flat, offsets)
        else:
            values, offsets = _lists_to_array(rows, flat, offsets, np.dtype(dtype), keep)
    except ValueError as exc:
        # NumPy's "inhomogeneous shape" names no row: a list of lists of two lengths.
        nested = _first_sequence(rows)
        if nested is None:
            raise
        raise errors.ConfigError(
            f"row {nested[0]} holds {nested[1]!r}, a sequence: rows of lists must be flat "
            "sequences of numbers; pass rows of items of a shape as NumPy arrays or tensors"
        ) from exc
    if values.ndim != 1:
        raise errors.ConfigError(
            f"rows of lists must be flat sequences of numbers (got items of shape "
            f"{values.shape[1:]}); pass rows of items of a shape as NumPy arrays or tensors"
        )
    return values, offsets, None, False


def _numbers_type(rows: list[NDArray[Any]]) -> np.dtype[Any] | None:
    """The array rows' result type, if it is of numbers (a row of strings, dates,
    records, complex or Python objects makes one that is not, or none)."""
    try:
        found = np.result_type(*rows)
    except TypeError:  # DTypePromotionError: dates beside numbers
        return None
    return found if _ragged.number_dtype(found) else None


def _plain_row(i: int, row: Any) -> Any:
    """An array row as it pads: a masked one's data (refused where an item is masked:
    padding would make it a real one), an ``object`` one a list (its items checked as a
    list's are); an array of no numbers (dates, strings, records, complex) is refused,
    where a cast would parse, drop or reinterpret its values. Other rows as they are."""
    if not isinstance(row, np.ndarray):
        return row
    if isinstance(row, np.ma.MaskedArray):
        j = _ragged.first_masked(np.ma.getmask(row))
        if j is not None:
            raise errors.ConfigError(
                f"row {i} is a masked array whose item {j} is masked; pad_batch pads every "
                "item of a row (its mask marks padding, not masked items): drop the masked "
                "items (row.compressed()) or fill them (row.filled(value))"
            )
        row = np.ma.getdata(row)
    dt = row.dtype
    if row.ndim == 0:
        return row  # a scalar: said so where rows are looked at
    if dt.hasobject and row.ndim == 1:
        return row.tolist()  # Python objects: checked as a list's items are
    if _ragged.numbers(row):
        return row
    shape = "" if dt.kind != "O" else f" and shape {row.shape}"
    raise errors.ConfigError(
        f"row {i} has dtype {dt}{shape}, which holds no numbers to pad; "
        f"{_ragged.no_numbers(dt, 'row')}"
    )


def _first_sequence(rows: list[Any]) -> tuple[int, Any] | None:
    """The first ``(row, item)`` whose item is itself a sequence (looked for only once
    NumPy has refused the items)."""
    for i, r in enumerate(rows):
        for v in r:
            if isinstance(v, (list, tuple)) or (isinstance(v, np.ndarray) and v.ndim):
                return i, v
    return None


def _tensor_array(i: int, row: Any, dtype: DTypeLike | None) -> NDArray[Any]:
    """A tensor row as a NumPy array (sharing a CPU tensor's memory; a device
    tensor is copied to host). A floating dtype NumPy lacks (bfloat16, float8)
    is widened to float32, which holds each of its values exactly, when
    ``dtype`` says what to pad in; without one there is no NumPy dtype to keep."""
    # A negative or conjugate bit (spectrum.conj().imag) is applied: numpy() refuses it.
    t = row.detach().cpu().resolve_conj().resolve_neg()
    try:
        return cast("NDArray[Any]", t.numpy())
    except TypeError as exc:  # "Got unsupported ScalarType BFloat16"
        if dtype is not None and t.is_floating_point():
            return cast("NDArray[Any]", t.float().numpy())
        raise errors.ConfigError(
            f"row {i} is a {t.dtype} tensor, which NumPy has no dtype for; pass "
            "dtype=torch.float32 (it holds every bfloat16 or float8 value exactly), or "
            "convert the rows"
        ) from exc


#: What NumPy raises for an item a dtype cannot take. NumPy 1.x converts a Python int of
#: the other sign (-1 to uint64, 2**63 to int64) with a DeprecationWarning and wraps it, and
#: takes a NumPy bool as an index with another, where 2.x raises OverflowError and
#: TypeError: where warnings are errors (-W error, pytest's filterwarnings) the warning
#: sends the item the checked way, and elsewhere the wrapped value is refused by the
#: float64 comparison (``_lists_to_array``'s, ``_item_fits``' own).
_MISFIT = (OverflowError, ValueError, TypeError, DeprecationWarning)


def _inferred(flat: list[Any], offsets: NDArray[np.int64]) -> NDArray[Any]:
    """``flat`` as NumPy infers it, unless that rounds an integer.

    NumPy makes float64 of integers past int64 beside other items (``[1, 2**63 + 5]``
    becomes ``[1.0, 2**63]``), and of integers beside floats: when every item is
    an integer of ``[0, 2**64)`` they are uint64 (what NumPy infers for such a
    value alone); otherwise an integer that float64 rounds raises, as it does
    with ``dtype=np.float64``. Only a float result past ``2**53`` is looked at again.
    """
    values = np.asarray(flat)
    if values.dtype.kind != "f" or values.size == 0:
        return values
    exact = 2.0 ** (np.finfo(values.dtype).nmant + 1)
    if -exact < values.min() and values.max() < exact:  # NaN fails both: looked at
        return values
    if float(values.max()) >= 2.0**63:  # (2.0**63 as float16, NumPy's choice, overflowed)
        try:
            return np.frombuffer(array("Q", flat), np.uint64)
        except _MISFIT:
            pass  # a float, a negative item or one past 64 bits: float64 it is, if exact
    _check_int_items(flat, values, offsets, values.dtype, None, inferred=True)
    return values


def _lists_to_array(
    rows: list[Any],
    flat: list[Any],
    offsets: NDArray[np.int64],
    dtype: np.dtype[Any],
    keep: int | None,
) -> tuple[NDArray[Any], NDArray[np.int64]]:
    """Flat items as the 64-bit type of ``dtype``'s kind, every value kept; the caller narrows.

    Converting straight to a narrow dtype would wrap NumPy integer scalars
    (``list(array)`` rows, arrays mixed with lists) silently, and NumPy
    truncates floats into an integer dtype. For integer and bool dtypes,
    ``array("q")`` takes integers only (a float raises instead of being
    truncated) and converts as fast as NumPy; anything else goes through
    NumPy and is compared with its float64 reading. Integers that a float
    dtype would round are looked for only past ``2**(nmant + 1)``.
    """
    wide, kind = dtype, _ragged.number_kind(dtype)
    if kind in "iub":
        wide = np.dtype(np.uint64 if kind == "u" else np.int64)
        try:
            return np.frombuffer(array("Q" if kind == "u" else "q", flat), wide), offsets
        except _MISFIT:
            pass  # floats, NumPy bools, strings or values past 64 bits: the checked way below
    elif kind == "f" and dtype.itemsize < 8:
        wide = np.dtype(np.float64)
    values, offsets, flat = _convert(rows, flat, offsets, wide, dtype, keep)
    if wide.kind in "iu":
        with np.errstate(over="ignore", invalid="ignore"):
            read = np.asarray(flat, dtype=np.float64)
        # Integers round alike on both sides; a truncated fraction or a wrapped value differs.
        _raise_first(values.astype(np.float64) != read, offsets, keep, flat.__getitem__, dtype)
    elif kind == "f" and values.size:
        _check_int_items(flat, values, offsets, dtype, keep)
    return values, offsets


def _convert(
    rows: list[Any],
    flat: list[Any],
    offsets: NDArray[np.int64],
    wide: np.dtype[Any],
    dtype: np.dtype[Any],
    keep: int | None,
) -> tuple[NDArray[Any], NDArray[np.int64], list[Any]]:
    """``flat`` as ``wide``; an item it cannot hold raises, unless truncation drops it.

    Returns the array, its offsets and the items it holds (the kept ones
    alone when only dropped items failed).
    """
    try:
        with np.errstate(over="raise", invalid="raise"):
            return np.asarray(flat, dtype=wide), offsets, flat
    except (*_MISFIT, FloatingPointError) as exc:
        # The slow path: find the item (among those truncation keeps).
        for i, r in enumerate(rows):
            for v in r if keep is None else r[:keep]:
                if not _item_fits(v, wide):
                    raise _misfit_error(i, v, dtype) from exc
        if keep is None:
            raise
        # Only items that truncation drops failed: convert the kept ones alone.
        kept = list(chain.from_iterable(r[:keep] for r in rows))
        short = np.zeros_like(offsets)
        np.cumsum([min(len(r), keep) for r in rows], out=short[1:])
        return np.asarray(kept, dtype=wide), short, kept


def _item_fits(v: Any, wide: np.dtype[Any]) -> bool:
    """``v`` converts to ``wide`` unchanged (NumPy wraps a NumPy integer that overflows)."""
    try:
        with np.errstate(over="raise", invalid="raise"):
            x = np.asarray(v, dtype=wide)
    except (*_MISFIT, FloatingPointError):
        return False
    if not isinstance(v, (int, float, np.number)):
        return True  # e.g. the string "7": NumPy parses it
    # Both as Python numbers, compared exactly: a wrapped uint64 beside a float16 scalar
    # compared as float16, and overflowed (a RuntimeWarning from NumPy).
    got, v = x.item(), v.item() if isinstance(v, np.generic) else v
    return bool(got == v) or (got != got and v != v)  # NaN stays NaN


def _check_int_items(
    flat: list[Any],
    values: NDArray[Any],
    offsets: NDArray[np.int64],
    dtype: np.dtype[Any],
    keep: int | None,
    *,
    inferred: bool = False,
) -> None:
    """Integer items that the float ``dtype`` cannot hold exactly raise.

    ``values`` is ``flat`` as floats; only items past ``2**(nmant + 1)`` in
    magnitude can have been rounded, and only those are looked at one by one.
    """
    # Strictly inside: an integer rounded to exactly 2**(nmant + 1) may have been one more.
    exact = 2.0 ** (np.finfo(dtype).nmant + 1)
    if -exact < values.min() and values.max() < exact:
        return
    with np.errstate(invalid="ignore"):
        large = np.flatnonzero(~(np.abs(values) < exact))  # NaN too: looked at, never an int

    def rounded(v: Any) -> bool:
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            return False
        with np.errstate(over="ignore"):
            f = dtype.type(v)
        return not np.isfinite(f) or int(f) != int(v)

    bad = np.zeros(values.size, dtype=np.bool_)
    bad[large] = [rounded(flat[j]) for j in large.tolist()]
    _raise_first(bad, offsets, keep, flat.__getitem__, dtype, inferred=inferred)
