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

from collections.abc import Sequence
from itertools import chain
from typing import Any, Literal

import numpy as np
from numpy.typing import DTypeLike, NDArray

# Modules, not names: this module's public names are exactly its __all__.
from headrace import errors, formats

__all__ = ["pad_batch"]


def _is_tensor(x: object) -> bool:
    # Checked by type name so that torch is imported only when a tensor is seen.
    return type(x).__module__.startswith("torch") and hasattr(x, "numpy")


def _check_pad(pad_value: int | float | bool, dtype: np.dtype[Any]) -> None:
    try:
        with np.errstate(over="ignore", invalid="ignore"):
            cast = np.array(pad_value).astype(dtype)
    except (OverflowError, ValueError) as exc:
        raise errors.ConfigError(f"pad_value {pad_value!r} does not fit dtype {dtype}") from exc
    got = cast.item()
    if dtype.kind in "fc" and not isinstance(pad_value, bool):
        # A float dtype rounds (0.1 in float32 is fine) and NaN != NaN; what
        # does not fit is a finite value that overflows to inf.
        fits = bool(np.isfinite(got)) or not bool(np.isfinite(pad_value))
        fits = fits and bool(np.isnan(got)) == bool(np.isnan(pad_value))
    else:
        fits = got == pad_value
    if not fits:
        raise errors.ConfigError(
            f"pad_value {pad_value!r} does not fit dtype {dtype} (becomes {cast})"
        )


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

    ``side`` says where padding goes ("left" for decoder prompts).
    ``width=None`` pads to the longest row; an ``int`` fixes it, and a longer
    row raises :class:`ConfigError` naming it unless ``truncate=True``, which
    keeps each row's *first* ``width`` items whatever the side. ``dtype``
    defaults to the rows' (NumPy's result type across rows; inferred from
    the values for Python lists); ``pad_value`` must fit it. An empty batch
    gives ``(0, width or 0)`` arrays.
    """
    if side not in ("right", "left"):
        raise errors.ConfigError(f"side must be 'right' or 'left' (got {side!r})")
    if width is not None and (isinstance(width, bool) or not isinstance(width, int) or width < 0):
        raise errors.ConfigError(f"width must be None or an int >= 0 (got {width!r})")
    torch_out = False
    rows: list[NDArray[Any]] | None = None
    if isinstance(seqs, formats.Ragged):
        values, offsets = seqs.values, seqs.offsets
    else:
        values, offsets, rows, torch_out = _flatten(list(seqs), dtype)
    out_dtype = np.dtype(dtype) if dtype is not None else values.dtype
    _check_pad(pad_value, out_dtype)
    n = offsets.size - 1
    lengths = np.diff(offsets)
    w = int(lengths.max(initial=0)) if width is None else width
    out = np.full((n, w), pad_value, dtype=out_dtype)
    mask = np.empty((n, w), dtype=np.bool_)
    if rows is not None:
        _fill_rows(rows, lengths, out, mask, left=side == "left", truncate=truncate)
    else:
        if values.dtype != out_dtype and values.size:
            values = values.astype(out_dtype, copy=False)
        formats.Ragged.fill(values, offsets, out, mask, left=side == "left", truncate=truncate)
    if torch_out:
        import torch

        if return_mask:
            return torch.from_numpy(out), torch.from_numpy(mask)
        return torch.from_numpy(out)
    return (out, mask) if return_mask else out


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
    rows: list[Any], dtype: DTypeLike | None
) -> tuple[NDArray[Any], NDArray[np.int64], list[NDArray[Any]] | None, bool]:
    """Python-list rows as flat values + offsets; NumPy/tensor rows as a list of arrays.

    Returns ``(values, offsets, arrays, from_torch)``: ``arrays`` is ``None``
    when the rows were flattened into ``values``; otherwise ``values`` is an
    empty array carrying the dtype.
    """
    is_tensor = [_is_tensor(r) for r in rows]
    from_torch = any(is_tensor)
    if from_torch:
        if not all(is_tensor):
            i = is_tensor.index(False)
            raise errors.ConfigError(
                f"row {i} is a {type(rows[i]).__name__} but other rows are torch tensors; "
                "pass all rows as tensors or none"
            )
        # CPU tensors share memory with these arrays; device tensors are copied to host.
        rows = [r.detach().cpu().numpy() for r in rows]
    lists = False
    for i, r in enumerate(rows):
        if isinstance(r, np.ndarray):
            if r.ndim != 1:
                raise errors.ConfigError(f"row {i} has shape {r.shape}; rows must be 1-D")
        elif isinstance(r, (list, tuple)):
            lists = True
        else:
            raise errors.ConfigError(
                f"row {i} is a {type(r).__name__}; expected a list, a 1-D NumPy array "
                "or a torch tensor"
            )
    lengths = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    default = np.dtype(dtype) if dtype is not None else np.dtype(np.int64)
    if not rows:
        return np.empty(0, dtype=default), offsets, None, False
    if not lists:
        dt = np.dtype(dtype) if dtype is not None else np.result_type(*rows)
        return np.empty(0, dtype=dt), offsets, rows, from_torch
    # Python lists (possibly mixed with arrays): one C-level pass over all
    # items, NumPy inferring the dtype unless given.
    flat = list(chain.from_iterable(rows))
    values = np.asarray(flat, dtype=dtype) if flat else np.empty(0, dtype=default)
    if values.ndim != 1:
        raise errors.ConfigError(
            f"rows must be flat sequences of numbers (got items of shape {values.shape[1:]})"
        )
    return values, offsets, None, False
