"""A mixture's batch from its sources' parts, where some keys' samples differ in shape.

Sources of a mixture read their parts of a batch on their own, and each stacks
its images when its part's agree: a part of 640x640 photos and one of 480x640,
or a stacked part and one already ragged, are then one batch of images of
several sizes. Such a key comes out as one source's batch of mixed sizes does
(:func:`~headrace.formats._file_samples.stack_samples`): a 1-D ``object`` array
of per-sample arrays beside ``<key>_shape`` ``(B, ndim)``, which the Loader
stacks again per step where a step's samples agree (``_layout.lay_out``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from headrace.pipeline._layout import Batch

__all__ = ["merge_parts"]


def merge_parts(
    n: int, parts: Sequence[tuple[NDArray[np.intp], Batch]], ragged: Iterable[str]
) -> Batch:
    """The ``n`` rows of a batch from ``parts`` (positions, arrays), keys in ``ragged``
    given per sample where the parts disagree in their samples' shape or dtype."""
    ragged = set(ragged)
    out: Batch = {}
    mixed = {k for k in ragged if _disagree(k, [p for _, p in parts])}
    for idx, part in parts:
        for k, v in part.items():
            if k in mixed or (k.endswith("_shape") and k.removesuffix("_shape") in mixed):
                continue
            dst = out.get(k)
            if dst is None:
                dst = out[k] = np.empty((n, *v.shape[1:]), dtype=v.dtype)
            dst[idx] = v
    for k in sorted(mixed):
        per = np.empty(n, dtype=object)
        for idx, part in parts:
            v = part[k]
            # A stacked part's sample as an array: v[i] of a 1-D one is a NumPy scalar,
            # which the loader's lay_out never stacks again (v[i, ...]: a 0-d view).
            stacked = v.dtype != object
            for i, j in enumerate(idx.tolist()):
                per[j] = v[i, ...] if stacked else v[i]
        ndim = max(np.ndim(e) for e in per)
        shapes = np.zeros((n, ndim), dtype=np.int64)
        for i, e in enumerate(per):
            shapes[i, : np.ndim(e)] = np.shape(e)
        out[k] = per
        out[f"{k}_shape"] = shapes
    return out


def _disagree(key: str, parts: list[Batch]) -> bool:
    """Whether ``key``'s samples cannot stack across ``parts``: one part holds them
    per sample, or the parts' stacked samples differ in shape or dtype."""
    seen: set[tuple[Any, ...]] = set()
    for part in parts:
        v = part.get(key)
        if v is None:
            continue
        if v.dtype == object and f"{key}_shape" in part:
            return True
        seen.add((v.dtype, v.shape[1:]))
    return len(seen) > 1
