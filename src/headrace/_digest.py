"""Hashing arrays by value, for digests of batches and samples (:mod:`headrace.testing`,
``sample_digests``): an array's bytes, an ``object`` array's elements one by one."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = ["hash_values"]


def hash_values(h: Any, a: NDArray[Any]) -> None:
    """Feed the values of ``a`` into ``h``: its bytes, viewed as such, without a copy
    where it is C-contiguous (a memoryview's cast refused datetime64 and timedelta64,
    and a shape with a 0); an ``object`` array's element by element, each one's dtype,
    shape and values (its buffer holds pointers), of any number of axes (a 2-D one, HDF5
    strings of shape (n, k), failed until 2026-12-07)."""
    if a.dtype != object:
        h.update(np.ascontiguousarray(a).reshape(-1).view(np.uint8).data)
        return
    for el in a.reshape(-1):
        e = np.ascontiguousarray(el)
        if e.dtype == object and not isinstance(el, np.ndarray):
            h.update(f"{type(el).__name__}:{el!r};".encode())  # no array's value: its repr
            continue
        h.update(f"{e.dtype.str}:{e.shape};".encode())
        hash_values(h, e)
