"""How a chunk's arrays become one batch per step, each laid out by its own samples.

A source reads a chunk of steps at once, so its arrays hold the chunk's batches
back to back. :func:`split_chunk` cuts them into steps; where samples differ in
shape or dtype (per-sample ``object`` arrays beside ``<key>_shape``, as
:class:`~headrace.formats.FileSource` gives them), :func:`lay_out` stacks each
step's samples that agree, so that a step comes out the same whatever chunk
size or worker count read it. Fixed-width strings (``U``, ``S``) are as wide as the
chunk's longest value where a source or transform made them from the chunk's values at
once (``np.array(names)``): :func:`narrow_strings` gives each step's its own width.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from headrace._stacking import stackable

__all__ = [
    "Batch",
    "lay_out",
    "narrow_strings",
    "nbytes",
    "ragged_keys",
    "split_chunk",
    "string_keys",
    "widened",
]

Batch = dict[str, NDArray[Any]]


def nbytes(arrays: Batch) -> int:
    """Bytes a batch holds, its samples of several shapes included (an ``object``
    array's own ``nbytes`` counts only its pointers: 8 bytes an image)."""
    total = 0
    for v in arrays.values():
        if v.dtype.hasobject:
            total += sum(e.nbytes for e in v.flat if isinstance(e, np.ndarray))
        total += v.nbytes
    return total


def ragged_keys(arrays: Batch) -> list[str]:
    """The keys held as per-sample ``object`` arrays beside a ``<key>_shape`` array (what
    :class:`~headrace.formats.FileSource` gives where samples differ in shape or dtype)."""
    return [k for k, v in arrays.items() if v.dtype == object and f"{k}_shape" in arrays]


def lay_out(batch: Batch, ragged: list[str]) -> Batch:
    """One step's batch as its own samples decide, not its chunk's: each ``ragged``
    key whose samples all agree in shape and dtype in this batch is stacked, and its
    ``<key>_shape`` dropped; otherwise ``<key>_shape`` keeps as many columns as this
    batch's samples have dimensions. A chunk is read whole, so a batch of equal images read in
    a chunk with another size of image would otherwise stay ragged, and the same step
    would come out differently with another chunk size or worker count."""
    for k in ragged:
        v = batch[k]
        if not len(v):
            continue
        if stackable(list(v)):
            batch[k] = np.stack(list(v))
            del batch[f"{k}_shape"]
        else:  # as wide as this batch's samples have dimensions, not the chunk's
            ndim = max(np.ndim(e) for e in v)
            batch[f"{k}_shape"] = batch[f"{k}_shape"][:, :ndim]
    return batch


def string_keys(arrays: Batch) -> list[str]:
    """The keys held as fixed-width strings (NumPy ``U`` or ``S``), or as records with
    such fields (``np.rec.fromarrays([names, ...])``)."""
    return [k for k, v in arrays.items() if _has_strings(v.dtype)]


def _has_strings(dtype: np.dtype[Any]) -> bool:
    if dtype.subdtype is not None:
        return _has_strings(dtype.subdtype[0])
    if dtype.names is not None:
        return any(_has_strings(dtype[n]) for n in dtype.names)
    return dtype.kind in "US"


def narrow_strings(batch: Batch, keys: list[str]) -> Batch:
    """``batch`` with each of ``keys``' strings as wide as its longest value (at least 1,
    as ``np.array`` of them makes them), not as the chunk it was read in: the same step
    read in another chunk, or by another worker, comes out alike. A step already that
    narrow keeps its view; another is a copy (its type, a mask, kept)."""
    for k in keys:
        v = batch[k]
        dtype = _narrowed(v.dtype, v)
        if dtype != v.dtype:
            batch[k] = v.astype(dtype)
    return batch


def _narrowed(dtype: np.dtype[Any], v: NDArray[Any]) -> np.dtype[Any]:
    """``dtype`` of ``v``'s values with each string as wide as its longest in ``v``. A
    record's fields narrow where NumPy laid it out (packed, as ``np.rec.fromarrays``
    makes it, or aligned); one with offsets of its own is kept as it is."""
    if dtype.subdtype is not None:  # v: the field's view, the sub-array's axes its own
        base, shape = dtype.subdtype
        inner = _narrowed(base, v)
        return dtype if inner == base else np.dtype((inner, shape))
    if dtype.names is not None:
        names, was = list(dtype.names), [dtype[n] for n in dtype.names]
        if _record(dtype.type, names, was, dtype.isalignedstruct) != dtype:
            return dtype  # offsets of its own (a file's gaps, titles): kept as they are
        formats = [_narrowed(f, v[n]) for n, f in zip(names, was, strict=True)]
        return (
            dtype if formats == was else _record(dtype.type, names, formats, dtype.isalignedstruct)
        )
    if dtype.kind not in "US":
        return dtype
    width = _widest(v)
    return dtype if width is None or width >= _chars(dtype) else np.dtype(f"{dtype.str[:2]}{width}")


def widened(a: np.dtype[Any], b: np.dtype[Any]) -> np.dtype[Any] | None:
    """The dtype that holds values of ``a`` and of ``b`` where they differ only in their
    strings' widths (as one source's reads may, or two sources' of one layout): each
    string as wide as the wider, of one kind (``U`` or ``S``: bytes are no text, and
    NumPy would decode them as ASCII), a record's fields so as NumPy lays them out.
    ``None`` where they differ otherwise: nothing else is widened."""
    if a == b:
        return a
    if a.subdtype is not None or b.subdtype is not None:
        if a.subdtype is None or b.subdtype is None or a.subdtype[1] != b.subdtype[1]:
            return None
        inner = widened(a.subdtype[0], b.subdtype[0])
        return None if inner is None else np.dtype((inner, a.subdtype[1]))
    if a.names is not None or b.names is not None:
        aligned = a.isalignedstruct
        if a.names != b.names or a.type is not b.type or b.isalignedstruct != aligned:
            return None
        names = list(a.names or ())
        was = [[d[n] for n in names] for d in (a, b)]
        if any(_record(d.type, names, f, aligned) != d for d, f in zip((a, b), was, strict=True)):
            return None  # offsets of their own (a file's gaps, titles): only as they are
        fields = []
        for x, y in zip(*was, strict=True):
            field = widened(x, y)
            if field is None:
                return None
            fields.append(field)
        return _record(a.type, names, fields, aligned)
    if a.kind not in "US" or b.kind != a.kind:
        return None
    order = a.str[0] if a.str[0] == b.str[0] else "="
    return np.dtype(f"{order}{a.kind}{max(_chars(a), _chars(b))}")


def _record(
    kind: type[Any], names: list[str], formats: list[np.dtype[Any]], aligned: bool
) -> np.dtype[Any]:
    """The record dtype of ``names`` and ``formats`` laid out as NumPy lays them out,
    packed or ``aligned`` (``kind``: ``np.void``, or ``np.record`` for a record array)."""
    return np.dtype((kind, np.dtype({"names": names, "formats": formats}, align=aligned)))


def _chars(dtype: np.dtype[Any]) -> int:
    """Characters a string of ``dtype`` holds (4 bytes each for ``U``)."""
    return dtype.itemsize // (4 if dtype.kind == "U" else 1)


def _widest(v: NDArray[Any]) -> int | None:
    """Characters of ``v``'s longest string (at least 1), or ``None`` where it holds none:
    the last character place not NUL in any of them (a string's trailing NULs are no
    part of its value; byte order does not make a character NUL)."""
    chars = _chars(v.dtype)
    if not v.size or not chars:
        return None
    raw = np.ascontiguousarray(np.asarray(v)).view(np.uint32 if v.dtype.kind == "U" else np.uint8)
    used = np.flatnonzero(raw.reshape(-1, chars).any(axis=0))
    return int(used[-1]) + 1 if used.size else 1


def split_chunk(steps: list[int], arrays: Batch, b: int) -> list[tuple[int, Batch]]:
    """``(step, batch)`` of each of ``steps``, whose ``b`` samples each lie back to back in
    ``arrays`` (views, copied only where :func:`lay_out` stacks ragged samples or
    :func:`narrow_strings` narrows strings)."""
    ragged, strings = ragged_keys(arrays), string_keys(arrays)
    out = [(t, {k: v[i * b : (i + 1) * b] for k, v in arrays.items()}) for i, t in enumerate(steps)]
    if ragged:
        out = [(t, lay_out(batch, ragged)) for t, batch in out]
    if strings:
        out = [(t, narrow_strings(batch, strings)) for t, batch in out]
    return out
