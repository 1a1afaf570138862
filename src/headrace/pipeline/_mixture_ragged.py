"""A mixture's batch from its sources' parts, where some keys' samples differ in shape.

Sources of a mixture read their parts of a batch on their own, and each stacks
its images when its part's agree: a part of 640x640 photos and one of 480x640,
or a stacked part and one already ragged, are then one batch of images of
several sizes. Such a key comes out as one source's batch of mixed sizes does
(:func:`~headrace.formats._file_samples.stack_samples`): a 1-D ``object`` array
of per-sample arrays beside ``<key>_shape`` ``(B, ndim)``, which the Loader
stacks again per step where a step's samples agree (``_layout.lay_out``).

Fixed-width strings (``U``, ``S``, records with such fields) are as wide as the values
a source read, so parts (and one source's reads) differ in width: a key's array is as
wide as its widest part (``_layout.widened``), never its first part's, which cut a
wider part's strings, and the Loader gives each step its own width again
(``_layout.narrow_strings``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from headrace.errors import DataError
from headrace.pipeline._layout import Batch, widened

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
                dst = out[k] = np.empty((n, *v.shape[1:]), dtype=_dtype(k, parts))
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


def _dtype(key: str, parts: Sequence[tuple[NDArray[np.intp], Batch]]) -> np.dtype[Any]:
    """The dtype of ``key``'s array that holds every part's: strings as wide as the
    widest part's. Anything else that differs was refused by the caller's checks
    (a mixture's layouts, a filter's stand-ins); here too, rather than cast."""
    dtypes = [p[key].dtype for _, p in parts if key in p]
    out = dtypes[0]
    for d in dtypes[1:]:
        wider = widened(out, d)
        if wider is None:
            raise DataError(
                f"the parts of a read give {key!r} as {dtypes[0]} and {d}: only strings "
                "differing in width are widened; map the sources to one dtype with "
                "Mapped(source, fn)"
            )
        out = wider
    return out


def _disagree(key: str, parts: list[Batch]) -> bool:
    """Whether ``key``'s samples cannot stack across ``parts``: one part holds them
    per sample, or the parts' stacked samples differ in shape or in dtype (other than
    strings of one kind in width, which stack as wide as the widest)."""
    first: NDArray[Any] | None = None
    for part in parts:
        v = part.get(key)
        if v is None:
            continue
        if v.dtype == object and f"{key}_shape" in part:
            return True
        if first is None:
            first = v
        elif v.shape[1:] != first.shape[1:] or widened(v.dtype, first.dtype) is None:
            return True
    return False
