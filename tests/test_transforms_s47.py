"""RandomCrop's fill on real images through a Loader (session 47): a NumPy integer or a
float fill the images' dtype cannot hold was wrapped or truncated into the padding
(np.int64(-1) became 255, 300.0 became 44, 1.5 became 1) where a Python -1 was refused."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from headrace.errors import DataError
from headrace.formats import FileSource
from headrace.pipeline import Loader
from headrace.transforms import RandomCrop


@pytest.fixture(scope="module")
def small_pngs(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Four 4x4 RGB PNGs, smaller than the crop: their borders are the fill."""
    from PIL import Image

    d = tmp_path_factory.mktemp("fill")
    for i in range(4):
        Image.fromarray(np.full((4, 4, 3), 10 + i, np.uint8)).save(d / f"{i}.png")
    return str(d / "*.png")


def crops(pattern: str, fill: Any) -> Loader:
    src = FileSource(pattern, format="png", shuffle=False)
    return Loader(src, batch_size=2, steps=2, transform=RandomCrop(8, fill=fill, flip=False))


@pytest.mark.parametrize("fill", [np.int64(-1), np.int16(300), 300.0, 1.5, float("nan")])
def test_a_fill_the_images_cannot_hold_is_refused_not_wrapped(small_pngs: str, fill: Any) -> None:
    with (
        pytest.raises(DataError, match=r"RandomCrop: fill=.* does not fit the images: sample "),
        crops(small_pngs, fill) as ld,
    ):
        next(iter(ld))


@pytest.mark.parametrize("fill", [np.uint8(7), 7.0, np.int64(7), 7])
def test_a_fill_that_fits_pads_as_given(small_pngs: str, fill: Any) -> None:
    with crops(small_pngs, fill) as ld:
        image = next(iter(ld))["image"]
    assert image.dtype == np.uint8 and image.shape == (2, 8, 8, 3)
    assert (image[:, 0] == 7).all() and (image[:, 2:6, 2:6] >= 10).all()
