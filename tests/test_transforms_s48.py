"""Transforms on real files and degenerate regions (session 48): a batch of NPY images
of both byte orders, which a file source hands over as they are stored, was refused by
RandomCrop and by CenterCrop without a resize ("is >u2 ..., the first was uint16"), which
resize them alike; and a RandomResizedCrop whose fallback region rounded to no pixels
(an image far thinner than the ratio range allows) came out all zeros, without a word."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headrace.formats import FileSource
from headrace.pipeline import Loader, Samples
from headrace.transforms import CenterCrop, RandomCrop, RandomResizedCrop


def numbers(n: int) -> Samples:
    return Samples(0, np.arange(n, dtype=np.int64))


@pytest.fixture(scope="module")
def both_orders(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Four uint16 NPY images of four sizes, alternately little- and big-endian; and the
    same images all native."""
    mixed, native = tmp_path_factory.mktemp("orders"), tmp_path_factory.mktemp("native")
    for i in range(4):
        a = np.arange((6 + i) * (7 + i), dtype=np.uint16).reshape(6 + i, 7 + i) * 300
        np.save(mixed / f"f{i}.npy", a.astype(">u2" if i % 2 else "<u2"))
        np.save(native / f"f{i}.npy", a)
    return mixed, native


@pytest.mark.parametrize(
    "t",
    [
        RandomCrop((4, 5), key="data"),
        RandomCrop((9, 12), key="data", fill=7),  # larger than some: fill around them
        CenterCrop((4, 5), key="data"),
        CenterCrop((9, 12), key="data"),
    ],
    ids=["random", "random-fill", "centre", "centre-pad"],
)
def test_images_of_both_byte_orders_crop_as_native_ones(
    both_orders: tuple[Path, Path], t: Any
) -> None:
    def batches(root: Path) -> list[Any]:
        src = FileSource(root, format="npy", shuffle="none")
        with Loader(src, batch_size=2, steps=2, transform=t) as ld:
            return [b["data"] for b in ld]

    got, want = batches(both_orders[0]), batches(both_orders[1])
    for g, w in zip(got, want, strict=True):
        assert g.dtype == np.uint16 and g.shape == (2, *t.size)
        assert np.array_equal(g, w)


def test_a_big_endian_batch_crops_to_a_native_array() -> None:
    # One stacked big-endian batch: the crop came out ">u2", unlike RandomResizedCrop's
    # and CenterCrop-with-resize's uint16 of the same images.
    imgs = np.arange(2 * 6 * 7 * 3, dtype=np.uint16).reshape(2, 6, 7, 3).astype(">u2")
    for t in (RandomCrop((4, 5)), RandomCrop((8, 8)), CenterCrop((4, 5))):
        got = t({"image": imgs}, numbers(2))["image"]
        want = t({"image": imgs.astype(np.uint16)}, numbers(2))["image"]
        assert got.dtype == np.uint16 and np.array_equal(got, want)
        none = t({"image": imgs[:0]}, numbers(0))["image"]  # no rows: the same layout
        assert none.dtype == np.uint16 and none.shape == (0, *t.size, 3)


@pytest.mark.parametrize(
    ("shape", "ratio"), [((10, 1), (3.0, 4.0)), ((1, 10), (0.1, 0.2))], ids=["tall", "wide"]
)
def test_a_fallback_region_keeps_at_least_one_pixel(
    shape: tuple[int, int], ratio: tuple[float, float]
) -> None:
    # The centre fallback's side rounded to 0 (round(1 / 3)): an empty region, which
    # Pillow resized to zeros, whatever the image held.
    rrc = RandomResizedCrop((4, 4), ratio=ratio, flip=False)
    top, left, h, w = rrc.region(*shape, np.random.default_rng(0))
    assert h >= 1 and w >= 1 and top + h <= shape[0] and left + w <= shape[1]
    img = np.full((1, *shape, 3), 200, np.uint8)
    got = rrc({"image": img}, numbers(1))["image"]
    assert got.shape == (1, 4, 4, 3) and (got == 200).all()
