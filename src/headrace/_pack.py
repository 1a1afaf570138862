"""A batch as few flat base arrays plus, per field, a view into one of them.

How a batch crosses a process boundary: the bases are copied (into a
shared-memory slot, or pickled) and the fields are rebuilt as views, so a
token batch's ``x`` and ``y`` (two views of one ``(B, L + 1)`` array) move
as one array, once.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from headrace._messages import masked_field
from headrace.errors import DataError
from headrace.pipeline import Batch

__all__ = ["Field", "Packed", "pack", "unpack"]


def _root(a: NDArray[Any]) -> NDArray[Any]:
    root = a
    while isinstance(root.base, np.ndarray):
        root = root.base
    return root


# A batch as flat base arrays plus, per field, (base index, element offset,
# shape, element strides) into them: how it crosses a worker queue (pickled
# once per base) and how it becomes tensors (one storage per base).
Field = tuple[int, int, tuple[int, ...], tuple[int, ...]]
Packed = tuple[list[NDArray[Any]], dict[str, Field]]


def _extent(a: NDArray[Any], start: int) -> tuple[int, int]:
    """Bytes ``[lo, hi)`` of its root that an array touches, ``start`` its first element's."""
    lo = start + sum(min(0, (n - 1) * s) for n, s in zip(a.shape, a.strides, strict=True))
    hi = start + sum(max(0, (n - 1) * s) for n, s in zip(a.shape, a.strides, strict=True))
    return lo, hi + a.itemsize


def pack(batch: Batch) -> Packed:
    """The batch as few flat bases as possible, each field a view into one of them.

    Fields that view one small stretch of memory share it: ``x``/``y`` of a
    token batch become views of one ``B * (L + 1)`` base, which then crosses
    a worker queue once (pickling the views would copy it twice) and becomes
    one tensor storage. Memory more than twice the fields' own bytes (a
    whole chunk or window) is not shared: such a field gets its own copy. A
    read-only field is copied too (torch must not write memory it borrowed),
    and so is one with negative or unaligned strides (torch has neither). A masked
    array is refused: its mask would be dropped.
    """
    groups: dict[tuple[int, np.dtype[Any]], list[tuple[str, NDArray[Any], int]]] = {}
    alone: list[tuple[str, NDArray[Any]]] = []
    for name, a in batch.items():
        if isinstance(a, np.ma.MaskedArray):
            raise DataError(masked_field(name, "a packed batch carries its bytes"))
        r = _root(a)
        start = a.__array_interface__["data"][0] - r.__array_interface__["data"][0]
        isz = a.itemsize
        if (
            a.size == 0
            or not a.flags.writeable
            or not r.flags.c_contiguous
            or start % isz
            or any(st % isz or st < 0 for st in a.strides)  # torch has no negative strides
        ):
            alone.append((name, a))
        else:
            # By dtype, not its string, which several share (ml_dtypes' FP8 kinds: "<V1";
            # records of other fields, one size: "|V12"): one base, one dtype.
            groups.setdefault((id(r), a.dtype), []).append((name, a, start))
    bases: list[NDArray[Any]] = []
    fields: dict[str, Field] = {}
    for members in groups.values():
        spans = [_extent(a, start) for _, a, start in members]
        lo, hi = min(x for x, _ in spans), max(y for _, y in spans)
        if hi - lo > 2 * sum(a.nbytes for _, a, _ in members):
            alone.extend((name, a) for name, a, _ in members)
            continue
        a0 = members[0][1]
        flat = _root(a0).reshape(-1).view(np.uint8)[lo:hi].view(a0.dtype)
        for name, a, start in members:
            isz = a.itemsize
            fields[name] = (len(bases), (start - lo) // isz, a.shape, _elems(a.strides, isz))
        bases.append(flat)
    for name, a in alone:
        # NumPy calls an array C-contiguous whatever the strides of its length-1 (or, when
        # empty, any) axes, which may be negative: copied too (torch has none).
        kept = a.flags.writeable and a.flags.c_contiguous and min(a.strides, default=0) >= 0
        c = np.array(a, order="C", copy=not kept)
        fields[name] = (len(bases), 0, c.shape, _elems(c.strides, c.itemsize))
        bases.append(c.reshape(-1))
    return bases, {name: fields[name] for name in batch}


def _elems(strides: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    return tuple(s // itemsize for s in strides)


def unpack(packed: Packed) -> Batch:
    """The fields of :func:`pack` as NumPy views of its bases."""
    bases, fields = packed
    out: Batch = {}
    for name, (i, off, shape, strides) in fields.items():
        b = bases[i]
        isz = b.itemsize
        out[name] = np.ndarray(
            shape, b.dtype, buffer=b, offset=off * isz, strides=tuple(s * isz for s in strides)
        )
    return out
