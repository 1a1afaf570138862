"""encode_png of 16-bit arrays of either byte order: a big-endian array (FITS files,
``np.frombuffer(..., ">u2")``, an HDF5 dataset stored so) is the same image."""

from __future__ import annotations

import numpy as np
import pytest

from headrace.formats import decode_png, encode_png


@pytest.mark.parametrize("shape", [(3, 5), (3, 5, 1), (3, 5, 2), (3, 5, 3), (3, 5, 4)])
def test_a_big_endian_uint16_array_encodes_as_its_native_copy(shape: tuple[int, ...]) -> None:
    native = np.random.default_rng(47).integers(0, 2**16, shape, dtype=np.uint16)
    big = native.astype(">u2")
    assert encode_png(big) == encode_png(native)
    got = decode_png(encode_png(big), name="x.png")
    assert np.array_equal(got, native if native.ndim == 3 else native[:, :, None])
