"""Fields of samples of several shapes as a list of tensors, one per sample.

A source gives such a field (images of several sizes, a variable number of
boxes per image) as a 1-D ``object`` array of per-sample arrays beside
``<key>_shape`` ``(B, ndim)``; where a step's samples happen to agree, the
loader stacks them (``headrace.pipeline._layout.lay_out``). A field named in
``ragged=`` comes out as ``list[torch.Tensor]`` in *every* batch (what a
detection collate_fn builds), whichever of the two layouts the step had, and
``<key>_shape`` as an ``int64`` tensor in every batch too, so a training loop
never meets a field that is a tensor in one step and a list in the next.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray

from headrace._messages import masked_field, object_field
from headrace.errors import ConfigError, DataError
from headrace.pipeline import Batch
from headrace.torch._tensors import (
    TensorBatch,
    _plain_strides,
    from_numpy,
    takeable,
    to_tensors,
    torch_has,
)

__all__ = ["RaggedTensorBatch", "check_ragged", "ragged_tensors"]

RaggedTensorBatch = dict[str, torch.Tensor | list[torch.Tensor]]


def check_ragged(ragged: Iterable[str] | None) -> tuple[str, ...]:
    """``ragged`` as the field names it gives, in order, once each (``None``: none;
    refused: a bare string, whose letters would be taken for names, and ``<key>_shape``
    fields). Read once: a generator of names gives them all."""
    if ragged is None:
        return ()
    try:
        names = None if isinstance(ragged, str | bytes) else list(ragged)
    except TypeError:  # not iterable (a number)
        names = None
    if names is None or not all(isinstance(k, str) for k in names):
        raise ConfigError(
            f"ragged takes the names of the fields to give as lists of per-sample tensors "
            f"(got {ragged!r}); pass a tuple, e.g. ragged=('image', 'boxes')"
        )
    shapes = [k for k in names if k.endswith("_shape")]
    if shapes:
        raise ConfigError(
            f"ragged names {shapes}: a field's <key>_shape is a tensor (B, ndim) beside its "
            f"list; name the field itself "
            f"(ragged={tuple(k.removesuffix('_shape') for k in shapes)})"
        )
    return tuple(dict.fromkeys(names))


def ragged_tensors(
    batch: Batch,
    keys: tuple[str, ...],
    *,
    contiguous: bool = False,
    pin_memory: bool = False,
    share: bool = False,
) -> RaggedTensorBatch:
    """The batch as tensors, the fields named in ``keys`` as ``list[torch.Tensor]``.

    Each sample's tensor is ``torch.from_numpy`` of its array (no copy), or of
    a copy where torch cannot share it (read-only, another byte order); a
    stacked field's samples are views of its one tensor (``unbind``). With
    ``pin_memory``, each is pinned (a stacked field once, then unbound).
    """
    missing = [k for k in keys if k not in batch]
    if missing:
        raise DataError(
            f"ragged names {missing}, which the batch does not hold (it holds "
            f"{sorted(batch)}); name fields the source gives"
        )
    listed = set(keys) | {f"{k}_shape" for k in keys}
    rest = {k: a for k, a in batch.items() if k not in listed}
    out: RaggedTensorBatch = {}
    dense: TensorBatch = to_tensors(rest, contiguous=contiguous, pin_memory=pin_memory, share=share)
    for k, a in batch.items():
        if k in dense:
            out[k] = dense[k]
        elif k in keys:
            samples = out[k] = _samples(k, a, contiguous=contiguous, pin_memory=pin_memory)
            out[f"{k}_shape"] = torch.from_numpy(_shapes(a, samples))
    return out


def _shapes(a: NDArray[Any], samples: list[torch.Tensor]) -> NDArray[np.int64]:
    """``<key>_shape``: a stacked field's trailing shape on every row, or an ``object``
    field's samples' shapes (zeros past a sample's own dimensions, as a source pads
    them). Made from the samples, never taken from the batch: a transform may give
    per-sample arrays without one, or resize them and pass the source's on unchanged."""
    if a.dtype != object:
        return np.tile(np.array(a.shape[1:], np.int64), (len(a), 1))
    shapes = np.zeros((len(samples), max((t.ndim for t in samples), default=0)), np.int64)
    for i, t in enumerate(samples):
        shapes[i, : t.ndim] = t.shape
    return shapes


def _samples(
    name: str, a: NDArray[Any], *, contiguous: bool, pin_memory: bool
) -> list[torch.Tensor]:
    if a.dtype != object:
        if a.ndim == 0:
            raise DataError(
                f"field {name!r} is a single value of shape (), not one per sample; "
                "leave it out of ragged="
            )
        t = to_tensors({name: a}, contiguous=contiguous, pin_memory=pin_memory)[name]
        return list(t.unbind(0))
    if a.ndim != 1:
        raise DataError(
            f"field {name!r} is an object array of shape {a.shape}; ragged= takes one "
            "array per sample (a 1-D object array, as a source gives samples of several "
            "shapes): an HDF5 variable-length dataset read whole per file gives one per "
            "item, so read it with samples_per_file= set to its length"
        )
    out = []
    for i, e in enumerate(a):
        if not isinstance(e, np.ndarray):
            raise DataError(
                f"{object_field(name, a)}, which make no tensor, in a list or not: turn "
                "them into numbers with a transform, or leave the field out of the batch"
            )
        if isinstance(e, np.ma.MaskedArray):  # from_numpy would drop its mask
            raise DataError(masked_field(f"{name}[{i}]", "a tensor holds its data"))
        if not torch_has(e.dtype):
            raise DataError(
                f"field {name!r}: sample {i} of the batch has dtype {e.dtype}, which torch "
                "has no tensor type for: turn it into numbers with a transform "
                "(extended precision: a.astype('float64')), or leave the field out of the "
                "batch"
            )
        if not e.dtype.isnative:
            e = e.astype(e.dtype.newbyteorder("="))
        elif contiguous or not e.flags.writeable or not _plain_strides(e.strides, e.itemsize):
            # torch must not write memory it borrowed read-only, and has no negative strides
            # nor partial-element ones (a member of a structured array: 6 bytes for an int32).
            e = np.array(e, order="C", copy=not (e.flags.writeable and e.flags.c_contiguous))
        t = from_numpy(takeable(e))
        out.append(t.pin_memory() if pin_memory else t)
    return out
