"""Transforms (session 49): 2- and 4-channel uint8 images resized as Pillow resizes
"LA" and "RGBA", through premultiplied alpha, changed the other channels' values (an
RGB-D or RGB-NIR array's colours scaled by its fourth band); channel-first ``(C, H, W)``
images were taken for ``(H, W, C)`` and cropped or resized into nonsense."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from headrace.errors import DataError
from headrace.formats import FileSource
from headrace.pipeline import Samples
from headrace.transforms import CenterCrop, RandomCrop, RandomResizedCrop


def numbers(n: int) -> Samples:
    return Samples(0, np.arange(n, dtype=np.int64))


def _planes(a: np.ndarray[Any, Any], width: int, height: int) -> np.ndarray[Any, Any]:
    """``a`` resized channel by channel, each as Pillow resizes grey ("L")."""
    return np.stack(
        [
            np.asarray(
                Image.fromarray(np.ascontiguousarray(a[..., c])).resize(
                    (width, height), Image.Resampling.BILINEAR
                )
            )
            for c in range(a.shape[2])
        ],
        axis=-1,
    )


@pytest.mark.parametrize("channels", [2, 4])
def test_a_resize_changes_no_channel_by_another(channels: int) -> None:
    # An RGB-D array of one colour, its depth (the fourth band) small: Pillow's RGBA
    # resize premultiplies by it and gave colours 170 to 255 for 200 (fails before).
    rng = np.random.default_rng(49)
    imgs = np.zeros((3, 16, 16, channels), np.uint8)
    imgs[..., :-1] = 200
    imgs[..., -1] = rng.integers(0, 8, (3, 16, 16))
    for t in (RandomResizedCrop((5, 6), scale=(0.3, 1.0)), CenterCrop((5, 6), resize=(9, 7))):
        got = t({"image": imgs}, numbers(3))["image"]
        assert got.shape == (3, 5, 6, channels)
        assert (got[..., :-1] == 200).all(), type(t).__name__
    # Every channel as Pillow resizes it alone, whatever the others hold.
    imgs = rng.integers(0, 256, (3, 16, 16, channels), dtype=np.uint8)
    got = CenterCrop((7, 9), resize=(7, 9))({"image": imgs}, numbers(3))["image"]
    for i in range(3):
        np.testing.assert_array_equal(got[i], _planes(imgs[i], 9, 7))
    rrc = RandomResizedCrop((7, 9), scale=(0.3, 1.0))
    got = rrc({"image": imgs}, numbers(3))["image"]
    for i, rng_i in enumerate(numbers(3).rngs()):
        top, left, h, w = rrc.region(16, 16, rng_i)
        want = _planes(imgs[i, top : top + h, left : left + w], 9, 7)
        np.testing.assert_array_equal(got[i], want[:, ::-1] if rng_i.random() < 0.5 else want)


def test_opaque_rgba_pngs_resize_as_pillow_resizes_them(tmp_path: Path) -> None:
    # Alpha 255 everywhere: the same pixels as Pillow's RGBA resize (premultiplying by
    # 255 changes nothing), read from real files.
    rng = np.random.default_rng(1)
    for i in range(3):
        a = rng.integers(0, 256, (20, 18, 4), dtype=np.uint8)
        a[..., 3] = 255
        Image.fromarray(a).save(tmp_path / f"{i}.png")
    src = FileSource(tmp_path, format="png", shuffle="none")
    imgs = src.read(0, np.arange(3))["image"]
    got = CenterCrop((8, 8), resize=10)({"image": imgs}, numbers(3))["image"]
    for i in range(3):
        pil = Image.open(tmp_path / f"{i}.png").resize((10, 11), Image.Resampling.BILINEAR)
        np.testing.assert_array_equal(got[i], np.asarray(pil)[2:10, 1:9])


@pytest.mark.parametrize(
    "t", [RandomCrop((8, 8)), RandomResizedCrop((8, 8)), CenterCrop((8, 8), resize=10)]
)
@pytest.mark.parametrize("channels", [1, 3, 4])
def test_channel_first_images_are_refused_saying_so(t: Any, channels: int) -> None:
    # (3, 32, 40) was read as 3 rows of 32 pixels of 40 channels: cropped or resized
    # into an array of the wrong shape, or 40 grey planes resized, without a word.
    imgs = np.zeros((2, channels, 32, 40), np.uint8)
    with pytest.raises(
        DataError,
        match=rf"sample 0's 'image' is uint8 \({channels}, 32, 40\).*channels first.*"
        r"\(H, W, C\).*np\.moveaxis",
    ):
        t({"image": imgs}, numbers(2))
    # As (H, W, C): cropped; tiny images and many bands as (H, W, C) still are.
    got = t({"image": imgs.transpose(0, 2, 3, 1)}, numbers(2))["image"]
    assert got.shape == (2, 8, 8, channels)
    for shape in ((3, 3, 3), (2, 2, 4), (4, 4, 1), (3, 3, 13), (16, 16, 13)):
        got = t({"image": np.ones((2, *shape), np.uint8)}, numbers(2))["image"]
        assert got.shape == (2, 8, 8, shape[2])
