"""Signed integer images through the resizing transforms (session 50): RandomResizedCrop
and CenterCrop(resize=...) refused int16 (elevation tiles, CT slices in Hounsfield
units), int8 and int32 (class-id masks). Each channel is now resized as Pillow's 32-bit
signed grey ("I"), int8 and int16 through int32; uint32 and 64-bit integers, which "I"
cannot hold (Image.fromarray wraps uint32 from 2**31 to negative values), are refused
naming the cast. A batch of two dtypes is told to cast them to one, not about PNG modes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from headrace.errors import DataError
from headrace.formats import FileSource
from headrace.pipeline import Loader, Samples
from headrace.testing import batch_digest
from headrace.transforms import CenterCrop, RandomCrop, RandomResizedCrop

INTS = [np.int8, np.int16, np.int32]


def numbers(n: int, seed: int = 0) -> Samples:
    return Samples(seed, np.arange(n, dtype=np.int64))


def pillow_i(a: np.ndarray[Any, Any], width: int, height: int, how: str) -> np.ndarray[Any, Any]:
    """The reference: each channel of ``a`` resized alone by Pillow as mode "I" (int32),
    back in ``a``'s dtype."""
    resample = Image.Resampling.NEAREST if how == "nearest" else Image.Resampling.BILINEAR
    planes = a[..., None] if a.ndim == 2 else a
    out = [
        np.asarray(
            Image.fromarray(np.ascontiguousarray(planes[..., c], np.int32)).resize(
                (width, height), resample
            )
        )
        for c in range(planes.shape[2])
    ]
    got = np.stack(out, axis=-1).reshape(height, width, *a.shape[2:])
    assert got.dtype == np.int32
    return got.astype(a.dtype)


def rrc_reference(
    rrc: RandomResizedCrop, imgs: np.ndarray[Any, Any], samples: Samples
) -> tuple[np.ndarray[Any, Any], int]:
    """What ``rrc`` should give: each sample's own region and flip, resized by Pillow."""
    height, width = rrc.size
    want = np.empty((len(imgs), height, width, *imgs.shape[3:]), imgs.dtype)
    mirrored = 0
    for i, rng in enumerate(samples.rngs()):
        top, left, h, w = rrc.region(imgs.shape[1], imgs.shape[2], rng)
        crop = imgs[i, top : top + h, left : left + w]
        one = pillow_i(crop, width, height, rrc.interpolation)
        mirror = rng.random() < 0.5
        mirrored += mirror
        want[i] = one[:, ::-1] if mirror else one
    return want, mirrored


def values(dtype: Any, shape: tuple[int, ...], seed: int) -> np.ndarray[Any, Any]:
    """int16 as a DEM or CT slice holds it (-1000 to 3000); int8 and int32 over their
    whole range, both ends included."""
    rng = np.random.default_rng(seed)
    if dtype == np.int16:
        return rng.integers(-1000, 3001, shape).astype(dtype)
    info = np.iinfo(dtype)
    a = rng.integers(info.min, int(info.max) + 1, shape, dtype=np.int64).astype(dtype)
    a.flat[0], a.flat[1] = info.min, info.max
    return a


@pytest.mark.parametrize("how", ["bilinear", "nearest"])
@pytest.mark.parametrize("dtype", INTS)
@pytest.mark.parametrize("channels", [0, 1, 3, 5])
def test_signed_int_images_resize_each_channel_as_pillows_int_grey(
    dtype: Any, channels: int, how: Any
) -> None:
    shape = (6, 30, 26) if channels == 0 else (6, 30, 26, channels)
    imgs = values(dtype, shape, 50)
    rrc = RandomResizedCrop((9, 11), scale=(0.2, 1.0), interpolation=how)
    samples = numbers(6, seed=3)
    got = rrc({"image": imgs}, samples)["image"]
    want, mirrored = rrc_reference(rrc, imgs, samples)
    assert got.dtype == dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    assert 0 < mirrored < 6
    # The same bytes again: no draw but the sample's own.
    assert rrc({"image": imgs}, samples)["image"].tobytes() == got.tobytes()
    # CenterCrop(resize=...): Resize then crop, both forms of resize (up and down).
    for resize, (rh, rw), (top, left) in ((13, (15, 13), (3, 1)), ((40, 37), (40, 37), (16, 13))):
        cc = CenterCrop((9, 11), resize=resize, interpolation=how)
        got = cc({"image": imgs}, samples)["image"]
        assert got.dtype == dtype
        for i in range(6):
            want_i = pillow_i(imgs[i], rw, rh, how)[top : top + 9, left : left + 11]
            np.testing.assert_array_equal(got[i], want_i)


@pytest.mark.parametrize("dtype", INTS)
def test_bilinear_stays_in_range_and_near_the_float_resize(dtype: Any) -> None:
    # Bilinear weights are a convex combination: every output lies between the
    # smallest and largest input, so int16 and int8 back from int32 never wrap; Pillow
    # rounds each pass, so within one step of the float resize of the same pixels.
    imgs = values(dtype, (8, 40, 33, 3), 7)
    info = np.iinfo(dtype)
    extremes = np.where(np.indices((40, 33)).sum(axis=0) % 2 == 0, info.min, info.max)
    imgs[0] = extremes.astype(dtype)[..., None]  # a checkerboard of both ends
    for t in (
        RandomResizedCrop((12, 10), scale=(0.1, 1.0)),
        CenterCrop((12, 10), resize=20),
        CenterCrop((50, 44), resize=(60, 50)),
    ):
        samples = numbers(8, seed=11)
        got = t({"image": imgs}, samples)["image"]
        assert got.dtype == dtype
        for i in range(8):
            assert imgs[i].min() <= got[i].min() and got[i].max() <= imgs[i].max()
        if dtype == np.int16:  # -1000..3000 (and the board), exact in float32
            as_f = t({"image": imgs.astype(np.float32)}, samples)["image"]
            assert np.abs(got[1:] - as_f[1:].astype(np.float64)).max() <= 1.0
    ct = np.full((2, 24, 24), -1000, np.int16)  # Hounsfield units: air beside bone
    ct[:, :, 12:] = 3000
    out = CenterCrop((16, 16), resize=18)({"image": ct}, numbers(2))["image"]
    assert out.dtype == np.int16 and set(np.unique(out)) > {-1000, 3000}
    assert out.min() == -1000 and out.max() == 3000


@pytest.mark.parametrize("dtype", INTS)
@pytest.mark.parametrize("channels", [0, 1, 3, 5])
def test_nearest_returns_only_input_values(dtype: Any, channels: int) -> None:
    # Class-id masks: nearest hands back input values only, large int32 ids exactly.
    shape = (4, 37, 29) if channels == 0 else (4, 37, 29, channels)
    masks = values(dtype, shape, 3)
    for t in (
        RandomResizedCrop((20, 50), interpolation="nearest"),
        CenterCrop((20, 30), resize=31, interpolation="nearest"),
    ):
        got = t({"image": masks}, numbers(4, 2))["image"]
        for i in range(4):
            assert np.isin(got[i], masks[i]).all(), type(t).__name__


def test_an_index_mask_says_which_pixel_nearest_took() -> None:
    # An int32 mask of each pixel's index (past 2**24, where float32 would blur ids):
    # nearest of it, cropped as the uint8 image beside it, names the very pixels the
    # image's nearest resize took.
    rng = np.random.default_rng(4)
    h, w = 300, 280
    image = rng.integers(0, 256, (3, h, w, 3), dtype=np.uint8)
    index = (np.arange(h * w, dtype=np.int32) + 2**30).reshape(h, w)
    masks = np.broadcast_to(index, (3, h, w)).copy()
    for t in (
        RandomResizedCrop((64, 48), interpolation="nearest"),
        CenterCrop((64, 48), resize=70, interpolation="nearest"),
    ):
        samples = numbers(3, seed=8)
        got_img = t({"image": image}, samples)["image"]
        got_idx = t({"image": masks}, samples)["image"].astype(np.int64) - 2**30
        assert got_idx.dtype == np.int64 and got_idx.min() >= 0
        for i in range(3):
            taken = image[i].reshape(-1, 3)[got_idx[i].ravel()].reshape(got_img[i].shape)
            np.testing.assert_array_equal(taken, got_img[i])


@pytest.mark.parametrize("dtype", [np.uint32, np.int64, np.uint64])
def test_integers_pillow_cannot_hold_are_refused_naming_the_cast(dtype: Any) -> None:
    # Pillow's "I" is 32-bit signed: Image.fromarray wrapped uint32 3e9 to -1294967296.
    imgs = np.full((2, 16, 16), 3_000_000_000, dtype)
    for t in (
        RandomResizedCrop((8, 8)),
        CenterCrop((8, 8), resize=10, interpolation="nearest"),
    ):
        with pytest.raises(
            DataError,
            match=rf"{type(t).__name__}: sample 0's 'image' is {np.dtype(dtype).name} "
            r"\(16, 16\).*32-bit signed.*\.astype\(np\.int32\).*Mapped",
        ):
            t({"image": imgs}, numbers(2))
    for other in (np.complex64, np.bool_):
        with pytest.raises(DataError, match=r"int8, int16 or int32"):
            RandomResizedCrop((8, 8))({"image": np.zeros((1, 16, 16), other)}, numbers(1))


@pytest.mark.parametrize(
    ("first", "second", "common"),
    [
        (np.float32, np.float16, "float32"),
        (np.uint8, np.int16, "int16"),
        (np.int32, np.float32, "float32"),  # float64 would be refused: float32
    ],
)
def test_a_batch_of_two_dtypes_is_told_to_cast_to_one(first: Any, second: Any, common: str) -> None:
    # Not the PNG-mode hint (image_mode='RGB' reads no NPY): both dtypes and the cast.
    imgs = np.empty(2, dtype=object)
    imgs[0], imgs[1] = np.zeros((12, 12, 3), first), np.zeros((12, 12, 3), second)
    for t in (RandomResizedCrop((8, 8)), CenterCrop((8, 8), resize=10), RandomCrop((8, 8))):
        if isinstance(t, RandomCrop):  # no resize: any dtype, float64 too
            common = np.result_type(first, second).name
        with pytest.raises(DataError) as info:
            t({"image": imgs}, numbers(2))
        message = str(info.value)
        assert f"is {np.dtype(second).name} (12, 12, 3), the first was {np.dtype(first).name}" in (
            message
        ), message
        assert f"image.astype(np.{common})" in message and "Mapped(" in message, message
        assert "PNG" not in message and "image_mode" not in message, message
    # Channel counts that differ still get the PNG-mode hint.
    imgs[1] = np.zeros((12, 12), first)
    with pytest.raises(DataError, match=r"image_mode='RGB'"):
        RandomResizedCrop((8, 8))({"image": imgs}, numbers(2))


@pytest.fixture(scope="module")
def dem_npys(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Eight int16 elevation tiles of several sizes, alternately little- and big-endian."""
    root = tmp_path_factory.mktemp("dem")
    rng = np.random.default_rng(5)
    for i in range(8):
        a = rng.integers(-1000, 3001, (20 + i, 30 - i)).astype(np.int16)
        np.save(root / f"d{i}.npy", a.astype(">i2" if i % 2 else "<i2"))
    return root


@pytest.mark.parametrize("how", ["bilinear", "nearest"])
def test_int16_npy_files_augment_the_same_whatever_reads_them(dem_npys: Path, how: Any) -> None:
    rrc = RandomResizedCrop((12, 12), key="data", interpolation=how)

    def epoch(**kw: Any) -> list[dict[str, Any]]:
        src = FileSource(dem_npys, format="npy")
        with Loader(src, batch_size=4, seed=6, steps=4, transform=rrc, **kw) as ld:
            return [{k: v.copy() for k, v in b.items()} for b in ld]

    whole = epoch()
    assert all(b["data"].dtype == np.int16 and b["data"].shape == (4, 12, 12) for b in whole)
    assert all(-1000 <= b["data"].min() and b["data"].max() <= 3000 for b in whole)
    digest = batch_digest(iter(whole))
    assert batch_digest(iter(epoch())) == digest
    halves = [epoch(rank=r, world_size=2) for r in range(2)]
    merged = [{k: np.concatenate([a[k], b[k]]) for k in a} for a, b in zip(*halves, strict=True)]
    assert batch_digest(iter(merged)) == digest
    assert batch_digest(iter(epoch(prefetch=0, chunk_steps=1))) == digest
