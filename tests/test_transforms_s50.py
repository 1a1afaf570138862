"""Float images through the resizing transforms (session 50): RandomResizedCrop and
CenterCrop(resize=...) refused float32 and float16 images ("it resizes uint8 or
uint16"), the depth maps, normalised images and rasters that NPY/NPZ/HDF5 samples hold.
Each channel is now resized as Pillow's 32-bit float grey ("F"), float16 through float32;
float64 is refused naming the cast, as Pillow keeps no 64-bit floats."""

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


def numbers(n: int, seed: int = 0) -> Samples:
    return Samples(seed, np.arange(n, dtype=np.int64))


def pillow_f(a: np.ndarray[Any, Any], width: int, height: int) -> np.ndarray[Any, Any]:
    """The reference: each channel of ``a`` resized alone by Pillow as mode "F" (float32),
    back in ``a``'s dtype."""
    planes = a[..., None] if a.ndim == 2 else a
    out = [
        np.asarray(
            Image.fromarray(np.ascontiguousarray(planes[..., c], np.float32)).resize(
                (width, height), Image.Resampling.BILINEAR
            )
        )
        for c in range(planes.shape[2])
    ]
    return np.stack(out, axis=-1).reshape(height, width, *a.shape[2:]).astype(a.dtype)


def rrc_reference(
    rrc: RandomResizedCrop, imgs: np.ndarray[Any, Any], samples: Samples
) -> tuple[np.ndarray[Any, Any], int]:
    """What ``rrc`` should give: each sample's own region and flip, resized by Pillow."""
    height, width = rrc.size
    want = np.empty((len(imgs), height, width, *imgs.shape[3:]), imgs.dtype)
    mirrored = 0
    for i, rng in enumerate(samples.rngs()):
        top, left, h, w = rrc.region(imgs.shape[1], imgs.shape[2], rng)
        one = pillow_f(imgs[i, top : top + h, left : left + w], width, height)
        mirror = rng.random() < 0.5
        mirrored += mirror
        want[i] = one[:, ::-1] if mirror else one
    return want, mirrored


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("channels", [0, 1, 2, 3, 4, 7])
def test_float_images_resize_each_channel_as_pillows_float_grey(dtype: Any, channels: int) -> None:
    # Normalised images (ImageNet mean and std taken off: negative values too), any
    # channel count; refused before ("it resizes uint8 or uint16").
    rng = np.random.default_rng(50)
    shape = (6, 30, 26) if channels == 0 else (6, 30, 26, channels)
    imgs = (rng.standard_normal(shape) * 2.5).astype(dtype)
    rrc = RandomResizedCrop((9, 11), scale=(0.2, 1.0))
    samples = numbers(6, seed=3)
    got = rrc({"image": imgs}, samples)["image"]
    want, mirrored = rrc_reference(rrc, imgs, samples)
    assert got.dtype == dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    assert 0 < mirrored < 6
    # CenterCrop(resize=...): Resize then crop, both forms of resize.
    for resize, (rh, rw), (top, left) in ((13, (15, 13), (3, 1)), ((12, 17), (12, 17), (2, 3))):
        got = CenterCrop((9, 11), resize=resize)({"image": imgs}, samples)["image"]
        assert got.dtype == dtype
        for i in range(6):
            want = pillow_f(imgs[i], rw, rh)[top : top + 9, left : left + 11]
            np.testing.assert_array_equal(got[i], want)


@pytest.mark.parametrize("channels", [0, 3])
def test_float_resize_agrees_with_the_uint8_resize_of_the_same_pixels(channels: int) -> None:
    # The same regions and flips as a uint8 batch of the same samples; Pillow's 8-bit
    # resize rounds its fixed-point sums, so within one step of the float result.
    rng = np.random.default_rng(7)
    shape = (8, 40, 33) if channels == 0 else (8, 40, 33, channels)
    u8 = rng.integers(0, 256, shape, dtype=np.uint8)
    for t in (RandomResizedCrop((12, 10), scale=(0.1, 1.0)), CenterCrop((12, 10), resize=20)):
        samples = numbers(8, seed=11)
        as_u8 = t({"image": u8}, samples)["image"].astype(np.float64)
        as_f32 = t({"image": u8.astype(np.float32)}, samples)["image"]
        assert as_f32.dtype == np.float32
        assert np.abs(as_f32 - as_u8).max() <= 1.0, type(t).__name__
        # uint8 values / 255, as a normalised image holds them: the same picture scaled.
        scaled = t({"image": (u8 / np.float32(255)).astype(np.float32)}, samples)["image"]
        assert np.abs(scaled * 255 - as_u8).max() <= 1.0, type(t).__name__


def test_float64_is_refused_naming_the_cast() -> None:
    # Pillow's "F" is float32: Image.fromarray narrows float64 without a word, so float64
    # out would hold float32's precision; the transform says so instead.
    imgs = np.zeros((2, 16, 16), np.float64)
    for t in (RandomResizedCrop((8, 8)), CenterCrop((8, 8), resize=10)):
        with pytest.raises(
            DataError,
            match=rf"{type(t).__name__}: sample 0's 'image' is float64 \(16, 16\).*float32 "
            r"precision.*\.astype\(np\.float32\)",
        ):
            t({"image": imgs}, numbers(2))
    for dtype in (np.complex64, np.bool_):  # int32 resizes (test_transforms_ints_s50)
        with pytest.raises(DataError, match=r"resizes uint8, uint16, float32 or float16"):
            RandomResizedCrop((8, 8))({"image": np.zeros((1, 16, 16), dtype)}, numbers(1))


@pytest.mark.parametrize("dtype", [np.float64, np.float16, np.float32, np.int32, np.complex64])
def test_crops_and_flips_without_a_resize_take_any_dtype(dtype: Any) -> None:
    # RandomCrop and CenterCrop without resize copy pixels: float64 kept exactly, NaN too.
    rng = np.random.default_rng(3)
    imgs = (rng.standard_normal((4, 12, 10, 2)) * 1e3).astype(dtype)
    if imgs.dtype.kind == "f":
        imgs[0, 5, 4, 1] = np.nan
    samples = numbers(4)
    got = RandomCrop((6, 5))({"image": imgs}, samples)["image"]
    assert got.dtype == dtype
    for i, r in enumerate(samples.rngs()):
        y, x = int(r.integers(0, 7)), int(r.integers(0, 6))
        want = imgs[i, y : y + 6, x : x + 5]
        np.testing.assert_array_equal(got[i], want[:, ::-1] if r.random() < 0.5 else want)
    got = CenterCrop((6, 5))({"image": imgs}, samples)["image"]
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, imgs[:, 3:9, 2:7])


def test_nan_and_inf_spread_only_to_the_pixels_whose_filter_reaches_them() -> None:
    # A depth map with holes (NaN) and a saturated pixel (inf): passed to Pillow as they
    # are. An output pixel is finite exactly where no non-finite input was under its
    # filter, and then it equals the resize of the holes filled with anything.
    rng = np.random.default_rng(9)
    imgs = rng.uniform(0.5, 10.0, (4, 48, 40)).astype(np.float32)
    imgs[:, 10, 12] = np.nan
    imgs[:, 30:32, 25] = np.nan
    imgs[:, 40, 5] = np.inf
    rrc = RandomResizedCrop((16, 14), scale=(0.5, 1.0))
    samples = numbers(4, seed=1)
    got = rrc({"image": imgs}, samples)["image"]
    want, _ = rrc_reference(rrc, imgs, samples)
    np.testing.assert_array_equal(got, want)  # NaN where Pillow puts it
    filled, _ = rrc_reference(rrc, np.nan_to_num(imgs, nan=0.0, posinf=0.0), samples)
    finite = np.isfinite(got)
    assert 0 < (~finite).sum() < 0.1 * got.size  # some pixels, not the picture
    np.testing.assert_array_equal(got[finite], filled[finite])
    # No NaN in, none out: the resize makes none of its own.
    clean = np.nan_to_num(imgs, nan=1.0, posinf=1.0)
    for t in (rrc, CenterCrop((16, 14), resize=17)):
        assert np.isfinite(t({"image": clean}, samples)["image"]).all()
    # float16 at its extremes stays finite: bilinear weights are a convex combination.
    big = np.full((2, 20, 20), np.finfo(np.float16).max, np.float16)
    out = CenterCrop((8, 8), resize=9)({"image": big}, numbers(2))["image"]
    assert out.dtype == np.float16 and (out == big.max()).all()


@pytest.fixture(scope="module")
def depth_npys(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Eight float32 depth maps of several sizes, alternately little- and big-endian."""
    root = tmp_path_factory.mktemp("depth")
    rng = np.random.default_rng(5)
    for i in range(8):
        a = rng.uniform(0.1, 80.0, (20 + i, 30 - i)).astype(np.float32)
        a[i, i] = np.nan  # a hole in each
        np.save(root / f"d{i}.npy", a.astype(">f4" if i % 2 else "<f4"))
    return root


def test_float_npy_files_augment_the_same_whatever_reads_them(depth_npys: Path) -> None:
    rrc = RandomResizedCrop((12, 12), key="data")

    def epoch(**kw: Any) -> list[dict[str, Any]]:
        src = FileSource(depth_npys, format="npy")
        with Loader(src, batch_size=4, seed=6, steps=4, transform=rrc, **kw) as ld:
            return [{k: v.copy() for k, v in b.items()} for b in ld]

    whole = epoch()
    assert all(b["data"].dtype == np.float32 and b["data"].shape == (4, 12, 12) for b in whole)
    digest = batch_digest(iter(whole))
    halves = [epoch(rank=r, world_size=2) for r in range(2)]
    merged = [{k: np.concatenate([a[k], b[k]]) for k in a} for a, b in zip(*halves, strict=True)]
    assert batch_digest(iter(merged)) == digest
    assert batch_digest(iter(epoch(prefetch=0, chunk_steps=1))) == digest
    # Worker processes: each sample's crop comes from (seed, sample), not the worker.
    torch = pytest.importorskip("torch")
    from headrace.torch import HeadraceDataLoader, TorchDataset

    for workers in (0, 2):
        ds = TorchDataset(
            FileSource(depth_npys, format="npy"), batch_size=4, seed=6, steps=4, transform=rrc
        )
        with HeadraceDataLoader(ds, num_workers=workers) as dl:
            got = [{k: v.numpy() for k, v in b.items() if torch.is_tensor(v)} for b in dl]
        assert batch_digest(iter(got)) == digest, workers
