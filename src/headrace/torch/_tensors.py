"""NumPy batches as tensors: ``torch.from_numpy`` views, no copies.

Token sources give ``x`` and ``y`` as two strided views of one ``(B, L + 1)``
array; they are handed to torch as views: through a worker queue the shared
storage then crosses into shared memory once, instead of two contiguous
copies being made and sent (``contiguous=True`` makes the copies anyway).
Pinned, they are one pinned storage, not two.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch

from headrace._messages import object_field
from headrace._pack import Packed, pack
from headrace._warn import warn_user
from headrace.errors import DataError
from headrace.pipeline import Batch

__all__ = ["TensorBatch", "pinnable", "tensorable", "tensors_of", "to_tensors"]

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
    ts = [torch.from_numpy(b) for b in bases]
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
    if contiguous:
        batch = {k: np.ascontiguousarray(a) for k, a in batch.items()}
    if not (share or pin_memory):
        out = {}
        for k, a in batch.items():
            if not (a.flags.writeable and _plain_strides(a.strides, a.itemsize)):
                break
            out[k] = torch.from_numpy(a)
        else:  # every field shared as it is: the common case, ~2.5 us for x and y
            return out
    return tensors_of(pack(batch), pin_memory=pin_memory)


def tensorable(batch: Batch) -> Batch:
    """``batch`` as torch can take it: fields of another byte order (big-endian NPY
    arrays, read as stored) converted to this machine's, which torch.from_numpy
    refuses; fields torch has no tensor for refused by name (a ragged field, samples
    of several shapes as an object array, or a structured NPY array would fail in
    torch with no hint of which)."""
    out = batch
    for k, a in batch.items():
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
        if a.dtype.kind not in "biufc":
            raise DataError(
                f"field {k!r} has dtype {a.dtype}, which torch has no tensor type for "
                "(structured, datetime, string and void arrays): turn it into numbers with "
                "a transform (e.g. one field per struct member, datetimes as int64 with "
                "a.view('int64')) or leave it out of the batch"
            )
        if not a.dtype.isnative:
            if out is batch:
                out = dict(batch)
            out[k] = a.astype(a.dtype.newbyteorder("="))
    return out


@lru_cache(maxsize=256)
def _plain_strides(strides: tuple[int, ...], itemsize: int) -> bool:
    """Whether ``torch.from_numpy`` can share an array with these strides (no negative or
    partial-element strides); cached, as every batch of a run has the same layout."""
    return all(s >= 0 and s % itemsize == 0 for s in strides)
