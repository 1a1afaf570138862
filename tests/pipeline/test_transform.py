"""Loader(transform=...): per-sample randomness keyed by (seed, sample number); RandomCrop."""

from __future__ import annotations

import functools
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray

from headrace.errors import ConfigError, DataError
from headrace.formats import FileSource, TokenSource, synthetic_arrays, write_sample_file
from headrace.pipeline import Loader, Mapped, Samples
from headrace.testing import assert_resume_exact, batch_digest
from headrace.transforms import (
    CenterCrop,
    RandomCrop,
    RandomResizedCrop,
    resize_threads,
    set_resize_threads,
)

L = 16


@pytest.fixture
def tokens(tmp_path: Path) -> Path:
    path = tmp_path / "t.bin"
    np.random.default_rng(0).integers(0, 50_000, 40_000, dtype=np.uint16).tofile(path)
    return path


def mask_tokens(arrays: dict[str, NDArray[Any]], samples: Samples) -> dict[str, NDArray[Any]]:
    """BERT-style: each sample masks its own random positions (module level: it pickles)."""
    x = arrays["x"].copy()
    for row, rng in zip(x, samples.rngs(), strict=True):
        row[rng.random(row.shape[0]) < 0.25] = 0
    return {"x": x, "y": arrays["y"]}


def source(path: Path) -> TokenSource:
    return TokenSource(path, dtype="uint16", context=L, window_bytes=16 << 10, block_bytes=4096)


def run(path: Path, steps: int = 40, **kw: Any) -> list[dict[str, NDArray[Any]]]:
    opts: dict[str, Any] = {"batch_size": 8, "seed": 5, "steps": steps, "transform": mask_tokens}
    opts.update(kw)
    with Loader(source(path), **opts) as loader:
        return [{k: v.copy() for k, v in b.items()} for b in loader]


def test_a_sample_is_transformed_the_same_way_whoever_reads_it(tokens: Path) -> None:
    base = run(tokens)
    digest = batch_digest(iter(base))
    masked = sum(int((b["x"] == 0).sum()) for b in base)
    assert 0.15 < masked / (40 * 8 * L) < 0.35  # the transform ran
    assert batch_digest(iter(run(tokens, transform=None))) != digest
    for kw in ({"prefetch": 0}, {"chunk_steps": 1}, {"chunk_steps": 3, "prefetch": 0}):
        assert batch_digest(iter(run(tokens, **kw))) == digest, kw
    # Two hosts: each transforms its half; together the same global batches.
    halves = [run(tokens, rank=r, world_size=2) for r in range(2)]
    merged = [{k: np.concatenate([a[k], b[k]]) for k in a} for a, b in zip(*halves, strict=True)]
    assert batch_digest(iter(merged)) == digest
    with Loader(source(tokens), batch_size=8, seed=5, transform=mask_tokens) as ld:
        assert batch_digest([ld.batch_at(17)]) == batch_digest([base[17]])
        assert ld.stats.transform_s > 0


def test_resume_replays_the_same_augmentation(tokens: Path) -> None:
    def make() -> Loader:
        return Loader(source(tokens), batch_size=8, seed=5, steps=30, transform=mask_tokens)

    assert_resume_exact(make, steps=30, resume_at=[1, 7, 29])


def test_each_sample_and_seed_has_its_own_stream() -> None:
    a = Samples(3, np.array([10, 11, 10], dtype=np.int64))
    draws = [rng.random() for rng in a.rngs()]
    assert draws[0] == draws[2] != draws[1]
    assert a.rng(1).random() == draws[1] and len(a) == 3
    assert Samples(4, np.array([10], dtype=np.int64)).rng(0).random() != draws[0]


def test_a_transform_that_breaks_the_rows_is_refused(tokens: Path) -> None:
    def drops_one(arrays: dict[str, NDArray[Any]], samples: Samples) -> dict[str, NDArray[Any]]:
        return {"x": arrays["x"][1:]}

    with pytest.raises(ConfigError, match=r"drops_one.* returned 'x' with shape \(7, 16\) for 8"):
        run(tokens, transform=drops_one)
    with pytest.raises(ConfigError, match=r"returned list; it must return a dict"):
        run(tokens, transform=lambda arrays, samples: [1])
    with pytest.raises(ConfigError, match="transform must be callable"):
        Loader(source(tokens), batch_size=8, transform=3)  # type: ignore[arg-type]


class _OneSample:  # torchvision's habit: a transform of one sample, called as t(x)
    def __call__(self, x: NDArray[Any]) -> NDArray[Any]:
        return x


def test_a_transform_that_cannot_take_arrays_and_samples_is_refused_when_made(
    tokens: Path,
) -> None:
    # It failed at the first batch, in the read-ahead thread: "onearg() takes 1
    # positional argument but 2 were given".
    with pytest.raises(ConfigError, match=r"transform _OneSample\(x\) cannot be called as"):
        Loader(source(tokens), batch_size=8, transform=_OneSample())  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"Mapped: fn .*<lambda>\(arrays\) cannot be called"):
        Mapped(source(tokens), lambda arrays: arrays)  # type: ignore[arg-type,misc]
    # Anything that takes two arguments passes: defaults, *args, partials, builtins.
    for ok in (
        lambda arrays, samples, extra=1: arrays,
        lambda *a: a[0],
        functools.partial(lambda k, arrays, samples: arrays, 1),
    ):
        assert len(run(tokens, steps=4, transform=ok)) == 4
    Loader(source(tokens), batch_size=8, transform=max)  # type: ignore[arg-type]


# -- RandomCrop on real JPEGs of several sizes ----------------------------------------

SIZES = [(40, 30), (64, 64), (20, 10), (33, 50), (24, 24), (50, 20)]


@pytest.fixture
def jpegs(tmp_path: Path) -> Path:
    root = tmp_path / "jpg"
    root.mkdir()
    for i, (h, w) in enumerate(SIZES * 2):
        arrays = synthetic_arrays("jpeg", seed=i, shape=(h, w, 3))
        write_sample_file("jpeg", root / f"f{i:02d}.jpg", arrays)
    return root


def test_random_crop_makes_one_array_of_crops_of_each_image(jpegs: Path) -> None:
    crop = RandomCrop((24, 16))
    src = FileSource(jpegs, format="jpeg")
    with Loader(src, batch_size=4, seed=1, steps=3, transform=crop) as loader:
        batches = [{k: v.copy() for k, v in b.items()} for b in loader]
    plain = FileSource(jpegs, format="jpeg", shuffle="none")
    for b in batches:
        assert b["image"].shape == (4, 24, 16, 3) and "image_shape" not in b
        originals = plain.read(0, b["index"])["image"]
        # Each row is a window (maybe mirrored) of its own image, or the image
        # centred in fill where it is smaller.
        samples = Samples(1, _global_numbers(b, batches))
        for i, img in enumerate(originals):
            want = _crop_again(np.asarray(img), samples.rng(i), (24, 16))
            assert np.array_equal(b["image"][i], want)
    plain.close()


def _global_numbers(b: dict[str, NDArray[Any]], batches: list[dict[str, NDArray[Any]]]) -> Any:
    step = next(i for i, x in enumerate(batches) if x is b)
    return np.arange(step * 4, step * 4 + 4, dtype=np.int64)


def _crop_again(img: NDArray[Any], rng: np.random.Generator, size: tuple[int, int]) -> Any:
    """RandomCrop's rule, written out again."""
    H, W = size
    h, w = img.shape[:2]
    y = int(rng.integers(0, max(h - H, 0) + 1))
    x = int(rng.integers(0, max(w - W, 0) + 1))
    crop = img[y : y + H, x : x + W]
    if rng.random() < 0.5:
        crop = crop[:, ::-1]
    out = np.zeros((H, W, 3), dtype=img.dtype)
    oy, ox = (H - crop.shape[0]) // 2, (W - crop.shape[1]) // 2
    out[oy : oy + crop.shape[0], ox : ox + crop.shape[1]] = crop
    return out


def test_random_crop_same_on_two_hosts_and_every_read_order(jpegs: Path) -> None:
    crop = RandomCrop((16, 16), flip=True)

    def epoch(**kw: Any) -> str:
        src = FileSource(jpegs, format="jpeg", **kw.pop("src", {}))
        with Loader(src, batch_size=4, seed=2, steps=3, transform=crop, **kw) as ld:
            return batch_digest(ld)

    digest = epoch()
    assert epoch(src={"mode": "map-style"}) == digest
    assert epoch(prefetch=0, chunk_steps=1) == digest
    halves = []
    for r in range(2):
        src = FileSource(jpegs, format="jpeg")
        with Loader(src, batch_size=4, seed=2, steps=3, transform=crop, rank=r, world_size=2) as ld:
            halves.append([{k: v.copy() for k, v in b.items()} for b in ld])
    merged = [{k: np.concatenate([a[k], b[k]]) for k in a} for a, b in zip(*halves, strict=True)]
    assert batch_digest(iter(merged)) == digest


def test_random_crop_refuses_what_it_cannot_crop() -> None:
    with pytest.raises(ConfigError, match="size must be two integers"):
        RandomCrop((0, 4))
    with pytest.raises(ConfigError, match=r"size must be \(height, width\) or one integer"):
        RandomResizedCrop("224")  # type: ignore[arg-type]
    assert RandomCrop(5).size == (5, 5) == RandomResizedCrop(5).size  # a square, as torchvision
    samples = Samples(0, np.arange(2, dtype=np.int64))
    with pytest.raises(ConfigError, match=r"no 'image' \(keys: \['data'\]\)"):
        RandomCrop((2, 2))({"data": np.zeros((2, 4, 4), np.uint8)}, samples)
    mixed = np.empty(2, dtype=object)
    mixed[0], mixed[1] = np.zeros((4, 4, 3), np.uint8), np.zeros((4, 4), np.uint8)
    with pytest.raises(DataError, match="same channels and dtype"):
        RandomCrop((2, 2))({"image": mixed}, samples)
    with pytest.raises(DataError, match=r"shape \(4,\)"):
        RandomCrop((2, 2))({"image": np.zeros((2, 4), np.uint8)}, samples)


def test_random_crop_is_an_identity_without_room_or_flip() -> None:
    imgs = np.arange(2 * 3 * 5, dtype=np.uint8).reshape(2, 3, 5)
    got = RandomCrop((3, 5), flip=False)({"image": imgs}, Samples(0, np.arange(2)))
    assert np.array_equal(got["image"], imgs)
    assert list(islice(iter(got), 1)) == ["image"]


def first_token(arrays: dict[str, NDArray[Any]], samples: Samples) -> dict[str, NDArray[Any]]:
    return {"x0": arrays["x"][:, 0].copy()}


def test_chunks_are_capped_by_what_the_source_read_not_the_smaller_output(tokens: Path) -> None:
    # A batch's x and y (views of one array, counted as 2 x 8 x 16 uint16) are
    # 512 bytes; the transform keeps 8 x 2 = 16.
    with Loader(
        source(tokens), batch_size=8, seed=5, steps=64, chunk_bytes=5000, transform=first_token
    ) as loader:
        batches = list(loader)
        assert loader.max_chunk_steps == 5000 // 512  # not min(32, 5000 // 16)
    assert len(batches) == 64 and batches[0]["x0"].shape == (8,)


class _Recorder:
    """A tiny source that logs the order of reads and read-aheads."""

    def __init__(self, log: list[str]) -> None:
        self.log = log

    def fingerprint(self) -> dict[str, Any]:
        return {"kind": "recorder"}

    @property
    def samples_per_epoch(self) -> int:
        return 1 << 20

    def read(self, seed: int, samples: NDArray[np.int64]) -> dict[str, NDArray[Any]]:
        self.log.append(f"read {int(samples[0])}")
        return {"v": samples.copy()}

    def prefetch(self, seed: int, samples: NDArray[np.int64]) -> None:
        self.log.append(f"prefetch {int(samples[0])}")


def test_the_next_chunks_reads_start_before_this_chunk_is_transformed() -> None:
    log: list[str] = []

    def note(arrays: dict[str, NDArray[Any]], samples: Samples) -> dict[str, NDArray[Any]]:
        log.append(f"transform {int(samples.numbers[0])}")
        return arrays

    with Loader(_Recorder(log), batch_size=2, steps=7, prefetch=0, transform=note) as ld:
        assert len(list(ld)) == 7
    # Chunks of 1, 2, 4 steps: the first is handed over at once (a quick first
    # batch); after that, each chunk's transform waits for the next chunk's prefetch.
    assert log == [
        "read 0",
        "transform 0",
        "prefetch 2",
        "read 2",
        "prefetch 6",
        "transform 2",
        "read 6",
        "transform 6",
    ]


# -- RandomResizedCrop -------------------------------------------------------------


def test_random_resized_crop_gives_one_array_the_same_on_two_hosts(jpegs: Path) -> None:
    rrc = RandomResizedCrop((20, 20))

    def epoch(**kw: Any) -> list[dict[str, NDArray[Any]]]:
        src = FileSource(jpegs, format="jpeg")
        with Loader(src, batch_size=4, seed=2, steps=3, transform=rrc, **kw) as ld:
            return [{k: v.copy() for k, v in b.items()} for b in ld]

    whole = epoch()
    assert all(b["image"].shape == (4, 20, 20, 3) and "image_shape" not in b for b in whole)
    halves = [epoch(rank=r, world_size=2) for r in range(2)]
    merged = [{k: np.concatenate([a[k], b[k]]) for k in a} for a, b in zip(*halves, strict=True)]
    assert batch_digest(iter(merged)) == batch_digest(iter(whole))
    assert batch_digest(iter(epoch(prefetch=0, chunk_steps=1))) == batch_digest(iter(whole))
    # The resize threads change speed, never bytes.
    before = resize_threads()
    try:
        for n in (1, 3):
            set_resize_threads(n)
            assert resize_threads() == n
            assert batch_digest(iter(epoch())) == batch_digest(iter(whole))
        with pytest.raises(ValueError, match="positive integer"):
            set_resize_threads(0)
    finally:
        set_resize_threads(before)


def test_random_resized_crop_of_the_whole_image_at_its_size_is_the_image() -> None:
    rng = np.random.default_rng(0)
    imgs = rng.integers(0, 256, (3, 12, 16, 3), dtype=np.uint8)
    whole = RandomResizedCrop((12, 16), scale=(1.0, 1.0), ratio=(16 / 12, 16 / 12), flip=False)
    got = whole({"image": imgs}, Samples(0, np.arange(3, dtype=np.int64)))["image"]
    assert np.array_equal(got, imgs)
    grey = rng.integers(0, 256, (2, 12, 16), dtype=np.uint8)
    got = whole({"image": grey}, Samples(0, np.arange(2, dtype=np.int64)))["image"]
    assert np.array_equal(got, grey)


@pytest.mark.parametrize("channels", [0, 3, 4])
def test_random_resized_crop_is_torchvisions_crop_resize_and_flip(channels: int) -> None:
    # What torchvision's RandomResizedCrop + RandomHorizontalFlip do to a PIL image,
    # written out with Pillow: crop, bilinear resize, then FLIP_LEFT_RIGHT. 4 channels
    # band by band (as "RGBa", as torchvision resizes a tensor): no premultiplied alpha
    # (tests/test_transforms_s49.py).
    from PIL import Image

    rng = np.random.default_rng(4)
    shape = (6, 30, 26) if channels == 0 else (6, 30, 26, channels)
    imgs = rng.integers(0, 256, shape, dtype=np.uint8)
    rrc = RandomResizedCrop((9, 11), scale=(0.2, 1.0))
    samples = Samples(3, np.arange(6, dtype=np.int64))
    got = rrc({"image": imgs}, samples)["image"]
    mirrored = 0
    for i, sample_rng in enumerate(samples.rngs()):
        top, left, h, w = rrc.region(30, 26, sample_rng)
        crop = np.ascontiguousarray(imgs[i, top : top + h, left : left + w])
        if channels == 4:
            pil = Image.frombuffer("RGBa", (w, h), crop, "raw", "RGBa", 0, 1)
        else:
            pil = Image.fromarray(crop)
        pil = pil.resize((11, 9), Image.Resampling.BILINEAR)
        if sample_rng.random() < 0.5:
            pil = pil.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
            mirrored += 1
        assert np.array_equal(got[i], np.asarray(pil)), i
    assert 0 < mirrored < 6


@pytest.mark.parametrize("channels", [0, 1, 3, 4])
def test_random_resized_crop_resizes_16_bit_images_channel_by_channel(
    channels: int, tmp_path: Path
) -> None:
    # 16-bit PNGs decode to uint16; the ImageNet augmentation refused them, "it resizes
    # uint8" (fails before: DataError). Each channel is resized as Pillow resizes 16-bit
    # grey (I;16), the same region and flip as a uint8 image of the same sample.
    from PIL import Image

    rng = np.random.default_rng(1)
    shape = (3, 20, 24) if channels == 0 else (3, 20, 24, channels)
    imgs = rng.integers(0, 65536, shape, dtype=np.uint16)
    rrc = RandomResizedCrop((8, 10), scale=(0.3, 0.9))
    samples = Samples(0, np.arange(3, dtype=np.int64))
    got = rrc({"image": imgs}, samples)["image"]
    assert got.dtype == np.uint16 and got.shape == (3, 8, 10, *shape[3:])
    for i, sample_rng in enumerate(samples.rngs()):
        top, left, h, w = rrc.region(20, 24, sample_rng)
        mirror = sample_rng.random() < 0.5
        crop = imgs[i, top : top + h, left : left + w]
        planes = crop[..., None] if channels == 0 else crop
        want = np.stack(
            [
                np.asarray(
                    Image.fromarray(np.ascontiguousarray(planes[..., c])).resize(
                        (10, 8), Image.Resampling.BILINEAR
                    )
                )
                for c in range(planes.shape[2])
            ],
            axis=-1,
        ).reshape(got.shape[1:])
        assert np.array_equal(got[i], want[:, ::-1] if mirror else want)
    # Through a FileSource of 16-bit PNGs, as training reads them.
    if channels in (3, 4):
        for i in range(3):
            write_sample_file("png", tmp_path / f"{i}.png", imgs[i])
        with Loader(FileSource(tmp_path, format="png"), batch_size=3, steps=1, transform=rrc) as ld:
            batch = next(iter(ld))
        assert batch["image"].dtype == np.uint16 and batch["image"].shape == (3, 8, 10, channels)


def test_random_resized_crop_regions_stay_inside_and_within_scale() -> None:
    rrc = RandomResizedCrop((8, 8), scale=(0.25, 0.5))
    for s in range(200):
        rng = np.random.default_rng(s)
        top, left, h, w = rrc.region(60, 90, rng)
        assert 0 <= top and top + h <= 60 and 0 <= left and left + w <= 90
        assert 0.2 <= h * w / (60 * 90) <= 0.55  # rounding of h and w
        assert 0.7 <= w / h <= 1.4
    # An image too thin for any tried region: the centre, clipped to the ratio range.
    assert rrc.region(4, 400, np.random.default_rng(0)) == (0, 197, 4, 5)


def test_random_resized_crop_refuses_what_it_cannot_resize() -> None:
    with pytest.raises(ConfigError, match="scale must satisfy"):
        RandomResizedCrop((4, 4), scale=(0.0, 1.0))
    with pytest.raises(ConfigError, match="ratio must satisfy"):
        RandomResizedCrop((4, 4), ratio=(2.0, 1.0))
    deep = np.zeros((1, 8, 8), np.complex64)  # floats and ints resize (test_transforms*_s50)
    with pytest.raises(DataError, match="resizes uint8, uint16, float32 or float16"):
        RandomResizedCrop((4, 4))({"image": deep}, Samples(0, np.arange(1, dtype=np.int64)))
    mixed = np.empty(2, dtype=object)
    mixed[0], mixed[1] = np.zeros((8, 8, 3), np.uint8), np.zeros((8, 8), np.uint8)
    with pytest.raises(DataError, match=r"sample 1's 'image' is uint8 \(8, 8\), the first was"):
        RandomResizedCrop((4, 4))({"image": mixed}, Samples(0, np.arange(2, dtype=np.int64)))
    mixed[1] = np.zeros((8, 8, 3), np.uint16)  # 8 and 16 bits in one batch
    with pytest.raises(DataError, match=r"is uint16 \(8, 8, 3\), the first was uint8"):
        RandomResizedCrop((4, 4))({"image": mixed}, Samples(0, np.arange(2, dtype=np.int64)))
    with pytest.raises(ConfigError, match="RandomResizedCrop: the batch has no 'image'"):
        RandomResizedCrop((4, 4))({"x": deep}, Samples(0, np.arange(1, dtype=np.int64)))


# -- CenterCrop ------------------------------------------------------------------------


def torchvision_eval(img: NDArray[Any], size: tuple[int, int], resize: Any) -> NDArray[Any]:
    """torchvision's ``Compose([Resize(resize), CenterCrop(size)])`` on a PIL image,
    written out with Pillow (torchvision 0.28's ``_compute_resized_output_size``,
    ``F.center_crop``'s padding and ``int(round(...))``)."""
    from PIL import Image, ImageOps

    pil = Image.fromarray(img)
    if resize is not None:
        w, h = pil.size
        if isinstance(resize, int):
            short, long = (w, h) if w <= h else (h, w)
            new_short, new_long = resize, int(resize * long / short)
            new_w, new_h = (new_short, new_long) if w <= h else (new_long, new_short)
        else:
            new_h, new_w = resize
        if (new_w, new_h) != pil.size:
            pil = pil.resize((new_w, new_h), Image.Resampling.BILINEAR)
    ch, cw = size
    w, h = pil.size
    if cw > w or ch > h:
        ltrb = (
            (cw - w) // 2 if cw > w else 0,
            (ch - h) // 2 if ch > h else 0,
            (cw - w + 1) // 2 if cw > w else 0,
            (ch - h + 1) // 2 if ch > h else 0,
        )
        pil = ImageOps.expand(pil, border=ltrb, fill=0)
        w, h = pil.size
    top, left = round((h - ch) / 2.0), round((w - cw) / 2.0)  # half to even, as int(round())
    return np.asarray(pil.crop((left, top, left + cw, top + ch)))


@pytest.mark.parametrize(
    ("size", "resize"),
    [((12, 12), 16), ((9, 7), 13), ((10, 11), None), ((40, 30), None), ((8, 9), (14, 11))],
)
@pytest.mark.parametrize("channels", [0, 3])
def test_center_crop_is_torchvisions_resize_and_center_crop(
    size: tuple[int, int], resize: Any, channels: int
) -> None:
    rng = np.random.default_rng(5)
    # Odd and even margins (round half to even), portrait and landscape, and images
    # smaller than the crop (padded with zeros, as torchvision pads).
    shapes = [(20, 15), (15, 20), (21, 18), (11, 13), (33, 32), (8, 8)]
    imgs = np.empty(len(shapes), dtype=object)
    for i, (h, w) in enumerate(shapes):
        imgs[i] = rng.integers(1, 256, (h, w) if channels == 0 else (h, w, channels), np.uint8)
    got = CenterCrop(size, resize=resize)({"image": imgs}, Samples(0, np.arange(len(shapes))))
    image = got["image"]
    assert image.shape == (len(shapes), *size, *((channels,) if channels else ()))
    for i in range(len(shapes)):
        assert np.array_equal(image[i], torchvision_eval(imgs[i], size, resize)), shapes[i]


def test_center_crop_reads_the_same_in_every_epoch_and_on_two_hosts(jpegs: Path) -> None:
    t = CenterCrop(20, resize=24)
    src = FileSource(jpegs, format="jpeg")
    n = len(list(jpegs.iterdir()))
    with Loader(src, batch_size=4, seed=1, steps=2 * n // 4, transform=t) as ld:
        by_index: dict[int, list[bytes]] = {}
        for b in ld:
            assert b["image"].shape == (4, 20, 20, 3) and "image_shape" not in b
            for i, img in zip(b["index"].tolist(), b["image"], strict=True):
                by_index.setdefault(i, []).append(img.tobytes())
    assert len(by_index) == n and all(len(set(v)) == 1 and len(v) == 2 for v in by_index.values())
    assert_resume_exact(
        lambda: Loader(FileSource(jpegs, format="jpeg"), batch_size=4, seed=1, transform=t),
        steps=5,
        resume_at=[2],
    )


@pytest.mark.parametrize("resize", [0, -3, True, 2.5, (3,), [4, "5"]])
def test_center_crop_refuses_a_bad_resize(resize: Any) -> None:
    with pytest.raises(ConfigError, match="CenterCrop resize must be"):
        CenterCrop(8, resize=resize)


def test_center_crop_refuses_mixed_channels() -> None:
    imgs = np.empty(2, dtype=object)
    imgs[0], imgs[1] = np.zeros((9, 9, 3), np.uint8), np.zeros((9, 9), np.uint8)
    with pytest.raises(DataError, match="CenterCrop: sample 1's 'image' is uint8 \\(9, 9\\)"):
        CenterCrop(4)({"image": imgs}, Samples(0, np.arange(2)))


def test_center_crop_without_resize_takes_any_dtype() -> None:
    imgs = np.arange(2 * 6 * 5, dtype=np.float32).reshape(2, 6, 5)
    got = CenterCrop((2, 3))({"image": imgs}, Samples(0, np.arange(2)))["image"]
    np.testing.assert_array_equal(got, imgs[:, 2:4, 1:4])
    with pytest.raises(DataError, match="it resizes uint8, uint16, float32 or float16"):
        CenterCrop((2, 3), resize=4)({"image": imgs.astype(np.complex64)}, Samples(0, np.arange(2)))
    # Without resizing only the layout matters; the message says what it takes (it said
    # "it resizes uint8 or uint16" of a float volume it would have cropped).
    with pytest.raises(DataError, match=r"float32 \(6, 5, 2, 1\); it crops \(H, W\)"):
        CenterCrop((2, 3))({"image": imgs.reshape(1, 6, 5, 2, 1)}, Samples(0, np.arange(1)))
