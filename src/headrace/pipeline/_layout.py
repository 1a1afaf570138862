"""How a chunk's arrays become one batch per step, each laid out by its own samples.

A source reads a chunk of steps at once, so its arrays hold the chunk's batches
back to back. :func:`split_chunk` cuts them into steps; where samples differ in
shape or dtype (per-sample ``object`` arrays beside ``<key>_shape``, as
:class:`~headrace.formats.FileSource` gives them), :func:`lay_out` stacks each
step's samples that agree, so that a step comes out the same whatever chunk
size or worker count read it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from headrace._stacking import stackable

__all__ = ["Batch", "lay_out", "nbytes", "ragged_keys", "split_chunk"]

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


def split_chunk(steps: list[int], arrays: Batch, b: int) -> list[tuple[int, Batch]]:
    """``(step, batch)`` of each of ``steps``, whose ``b`` samples each lie back to back in
    ``arrays`` (views, copied only where :func:`lay_out` stacks ragged samples)."""
    ragged = ragged_keys(arrays)
    out = [(t, {k: v[i * b : (i + 1) * b] for k, v in arrays.items()}) for i, t in enumerate(steps)]
    return [(t, lay_out(batch, ragged)) for t, batch in out] if ragged else out
