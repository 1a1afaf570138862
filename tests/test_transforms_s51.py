"""RandomResizedCrop's regions are torchvision's ``get_params``, written out apart.

The other tests take ``region`` as given; here it is held to torchvision 0.28's
``RandomResizedCrop.get_params`` (its ten tries, then the centre clipped to the ratio),
drawn from the same per-sample generator in the same order: scale, log-ratio, then the
top and left of a region that fits."""

from __future__ import annotations

import math

import numpy as np
import pytest

from headrace.transforms import RandomResizedCrop


def torchvision_region(
    height: int,
    width: int,
    scale: tuple[float, float],
    ratio: tuple[float, float],
    rng: np.random.Generator,
) -> tuple[int, int, int, int]:
    area = height * width
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        target_area = area * rng.uniform(scale[0], scale[1])
        aspect_ratio = math.exp(rng.uniform(log_ratio[0], log_ratio[1]))
        w = round(math.sqrt(target_area * aspect_ratio))
        h = round(math.sqrt(target_area / aspect_ratio))
        if 0 < w <= width and 0 < h <= height:
            i = int(rng.integers(0, height - h + 1))
            j = int(rng.integers(0, width - w + 1))
            return i, j, h, w
    in_ratio = float(width) / float(height)
    if in_ratio < min(ratio):
        w = width
        h = round(w / min(ratio))
    elif in_ratio > max(ratio):
        h = height
        w = round(h * max(ratio))
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


@pytest.mark.parametrize(
    ("scale", "ratio"),
    [((0.08, 1.0), (3 / 4, 4 / 3)), ((0.5, 0.9), (0.2, 5.0)), ((1.0, 1.0), (1.0, 1.0))],
)
def test_regions_are_torchvisions_get_params(
    scale: tuple[float, float], ratio: tuple[float, float]
) -> None:
    rrc = RandomResizedCrop((8, 8), scale=scale, ratio=ratio)
    shapes = [(1, 1), (2, 2), (3, 200), (200, 3), (40, 41), (224, 224), (480, 640), (17, 5)]
    for height, width in shapes:
        for seed in range(40):
            ours = rrc.region(height, width, np.random.default_rng(seed))
            theirs = torchvision_region(height, width, scale, ratio, np.random.default_rng(seed))
            assert ours == theirs, (height, width, seed)
