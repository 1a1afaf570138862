"""When per-sample arrays make one batch array: shared by formats (a file source's
batch) and pipeline (a chunk's batches laid out anew), which cannot import each other."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = [
    "PLAIN",
    "stackable",
]

#: Array types whose bytes are their values: a plain array, or a memory map of one.
PLAIN = (np.ndarray, np.memmap)


def stackable(parts: Sequence[Any]) -> bool:
    """All ``parts`` are arrays of one shape and one dtype, up to byte order.

    Byte order is not the kind of value: files of one dataset written on machines
    (or by tools) of both orders hold the same floats, and ``np.stack`` makes them
    one native array, as it does for parts all in the other order. Compared
    exactly, a batch mixing them came out ragged (an ``object`` array).

    Plain arrays only (a memory map's are): ``np.stack`` drops masked arrays' masks
    (and makes a plain array of record arrays, and cannot stack matrices), so such
    samples stay apart, as they are.
    """
    if not parts or not all(type(p) in PLAIN for p in parts):
        return False
    first = parts[0]
    native = first.dtype.newbyteorder("=")
    return all(
        p.shape == first.shape and (p.dtype == first.dtype or p.dtype.newbyteorder("=") == native)
        for p in parts
    )
