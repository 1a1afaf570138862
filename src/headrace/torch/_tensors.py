"""NumPy batches as tensors: ``torch.from_numpy`` views, no copies.

Token sources give ``x`` and ``y`` as two strided views of one ``(B, L + 1)``
array; they are handed to torch as views: through a worker queue the shared
storage then crosses into shared memory once, instead of two contiguous
copies being made and sent (``contiguous=True`` makes the copies anyway).
Pinned, they are one pinned storage, not two.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray

from headrace._messages import masked_field, object_field
from headrace._pack import Packed, pack
from headrace._warn import warn_user
from headrace.errors import DataError
from headrace.pipeline import Batch

__all__ = [
    "TensorBatch",
    "from_numpy",
    "pinnable",
    "takeable",
    "tensorable",
    "tensors_of",
    "to_tensors",
    "torch_has",
]

TensorBatch = dict[str, torch.Tensor]


def pinnable(who: str) -> bool:
    """Whether ``pin_memory=True`` pins: not where nothing could use pinned pages (no
    accelerator), which is said, as a stock DataLoader says it, and the batches go on
    unpinned, so one training script runs on a laptop or CI box and on a GPU host."""
    if torch.accelerator.is_available():
        return True
    warn_user(
        f"{who}(pin_memory=True): no accelerator (torch.accelerator.is_available() is "
        "False), so nothing is pinned; the batches are the same.",
        UserWarning,
    )
    return False


def tensors_of(packed: Packed, *, pin_memory: bool = False) -> TensorBatch:
    """The fields of :func:`pack` as tensors: one storage per base (``torch.from_numpy``)."""
    bases, fields = packed
    ts = [from_numpy(b) for b in bases]
    if pin_memory:
        ts = [t.pin_memory() for t in ts]
    return {
        name: ts[i].as_strided(shape, strides, off)
        for name, (i, off, shape, strides) in fields.items()
    }


def to_tensors(
    batch: Batch, *, contiguous: bool = False, pin_memory: bool = False, share: bool = False
) -> TensorBatch:
    """Tensors sharing memory with the arrays (``torch.from_numpy``); views stay views.

    ``share=True`` (implied by ``pin_memory``) makes fields that view one
    stretch of memory views of one tensor storage, as :func:`pack` does: it
    pays where the storage is copied afterwards (pinned, or put into shared
    memory by a worker queue), and costs a few microseconds of Python
    otherwise. Read-only fields, and fields with negative strides, are
    copied either way.
    """
    batch = tensorable(batch)
    if contiguous:  # (np.ascontiguousarray gives a 0-d field a dimension: shape (1,))
        batch = {k: np.asarray(a, order="C") for k, a in batch.items()}
    if not (share or pin_memory):
        out = {}
        for k, a in batch.items():
            if not (a.flags.writeable and _plain_strides(a.strides, a.itemsize)):
                break
            out[k] = from_numpy(a)
        else:  # every field shared as it is: the common case, ~2.5 us for x and y
            return out
    return tensors_of(pack(batch), pin_memory=pin_memory)


def tensorable(batch: Batch) -> Batch:
    """``batch`` as torch can take it (:func:`takeable`: fields of another byte order, such
    as big-endian NPY arrays read as stored, converted to this machine's, which
    torch.from_numpy refuses); fields torch has no tensor for refused by name (a ragged
    field, samples of several shapes as an object array, or a structured or float128
    NPY array would fail in torch with no hint of which), and so is a masked array
    (torch.from_numpy took its data and dropped its mask)."""
    out = batch
    for k, a in batch.items():
        if isinstance(a, np.ma.MaskedArray):
            raise DataError(masked_field(k, "a tensor holds its data"))
        if a.dtype == object:
            raise DataError(
                f"{object_field(k, a.flat)}, which make no tensor: take each sample's "
                f"array as a tensor in a list with TorchDataset(..., ragged=({k!r},)) (as a "
                "detection collate_fn gives images and boxes), or give them one shape with "
                "a transform (headrace.transforms.RandomCrop, RandomResizedCrop, or your "
                "own); images of several channel counts (PNGs mixing grey, RGB and RGBA) "
                "take one with FileSource(..., image_mode='RGB'); strings: turn them into "
                "numbers with a transform, or leave them out of the batch"
            )
        if not torch_has(a.dtype):
            raise DataError(
                f"field {k!r} has dtype {a.dtype}, which torch has no tensor type for "
                "(structured, datetime, string and void arrays, and extended precision: "
                "float128, complex256): turn it into numbers with a transform (e.g. one "
                "field per struct member, datetimes as int64 with a.view('int64'), "
                "a.astype('float64')) or leave it out of the batch"
            )
        taken = takeable(a)
        if taken is not a:
            if out is batch:
                out = dict(batch)
            out[k] = taken
    return out


#: The floating types torch.from_numpy takes (every sized integer and bool too).
_FLOATS = (np.float16, np.float32, np.float64, np.complex64, np.complex128)

#: The type codes of NumPy's own dtypes for those (``np.uint64``'s, not ``ulonglong``'s):
#: an array of one of them, in this machine's byte order, goes to torch as it is.
_TAKEN = "".join(np.dtype(t).char for t in (*_FLOATS, np.bool_)) + "".join(
    np.dtype(f"{kind}{size}").char for kind in "iu" for size in (1, 2, 4, 8)
)


def torch_has(dtype: np.dtype[Any]) -> bool:
    """Whether torch has a tensor type for ``dtype``: not for NumPy's extended precision
    (``longdouble``, ``clongdouble``), which ``torch.from_numpy`` refused naming no field;
    for ml_dtypes' numbers that torch has (bfloat16, float8: :func:`from_numpy`)."""
    return (
        dtype.char in _TAKEN
        or dtype.kind in "biu"
        or dtype.type in _FLOATS
        or _ml_float(dtype) is not None
    )


def takeable(a: NDArray[Any]) -> NDArray[Any]:
    """``a`` as ``torch.from_numpy`` takes it (``a`` itself where it does): another byte
    order (big-endian NPY arrays, read as stored) converted to this machine's, and a
    sized integer of another type code than NumPy's own for its size (``ulonglong``,
    which torch refuses, is ``uint64`` by another code) viewed as that one."""
    if a.dtype.isnative and a.dtype.char in _TAKEN:
        return a  # (the common case, in a few hundred nanoseconds)
    if not a.dtype.isnative:
        a = a.astype(a.dtype.newbyteorder("="))
    if a.dtype.kind in "biu":
        sized = _sized(a.dtype)
        if a.dtype.char != sized.char:
            a = a.view(sized)
    return a


def from_numpy(a: NDArray[Any]) -> torch.Tensor:
    """``torch.from_numpy(a)`` (shared, no copy), for ml_dtypes' numbers too: NumPy knows
    them as void or float arrays of its own, torch.from_numpy not at all, so their bytes
    go as unsigned integers of their size, viewed as torch's type of the same name."""
    ml = None if a.dtype.char in _TAKEN else _ml_float(a.dtype)
    if ml is None:
        return torch.from_numpy(a)
    return torch.from_numpy(a.view(f"u{a.itemsize}")).view(ml)


@lru_cache(maxsize=64)
def _sized(dtype: np.dtype[Any]) -> np.dtype[Any]:
    return np.dtype(f"{dtype.kind}{dtype.itemsize}")


@lru_cache(maxsize=64)
def _ml_float(dtype: np.dtype[Any]) -> torch.dtype | None:
    """torch's type for an ml_dtypes number (``bfloat16``, ``float8_e4m3fn``, ...): a
    floating type of the same name and size; ``None`` for every other dtype."""
    if dtype.kind not in "fV" or dtype.type in _FLOATS or dtype.fields or dtype.subdtype:
        return None
    found = getattr(torch, dtype.name, None)
    if isinstance(found, torch.dtype) and found.is_floating_point:
        return found if found.itemsize == dtype.itemsize else None
    return None


@lru_cache(maxsize=256)
def _plain_strides(strides: tuple[int, ...], itemsize: int) -> bool:
    """Whether ``torch.from_numpy`` can share an array with these strides (no negative or
    partial-element strides); cached, as every batch of a run has the same layout."""
    return all(s >= 0 and s % itemsize == 0 for s in strides)
