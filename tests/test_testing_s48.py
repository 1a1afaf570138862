"""``batch_digest`` of object arrays of any number of axes (HDF5 strings of shape
(n, k)), by value; the digests of 1-D object arrays and plain arrays are unchanged."""

from __future__ import annotations

import hashlib

import numpy as np

from headrace.testing import batch_digest


def _old_digest(name: str, a: np.ndarray) -> str:
    """What batch_digest gave a 1-D object array of arrays until 2026-12-07."""
    h = hashlib.sha256()
    h.update(f"{name}:object:{a.shape};".encode())
    for el in a:
        e = np.ascontiguousarray(el)
        h.update(f"{e.dtype.str}:{e.shape};".encode())
        h.update(e.reshape(-1).view(np.uint8).data)
    return h.hexdigest()


def test_a_2d_object_array_is_hashed_by_value() -> None:
    a = np.empty((2, 2), dtype=object)
    a[:] = [[b"ab", b"c"], [b"", b"d"]]
    b = np.empty((2, 2), dtype=object)
    b[:] = [[b"ab", b"c"], [b"", b"d"]]  # other objects, the same values
    assert batch_digest([{"s": a}]) == batch_digest([{"s": b}])
    b[1, 1] = b"e"
    assert batch_digest([{"s": a}]) != batch_digest([{"s": b}])


def test_digests_of_1d_object_arrays_are_as_before() -> None:
    a = np.empty(3, dtype=object)
    a[:] = [np.arange(3, dtype=np.uint8), np.zeros((2, 2), np.float32), np.array(b"xy")]
    assert batch_digest([{"image": a}]) == _old_digest("image", a)
