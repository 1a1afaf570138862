"""Ready-made per-sample transforms for ``Loader(transform=...)``.

Each is a small picklable object (so it runs in worker processes too) whose
randomness comes only from the per-sample generators the loader passes
(:class:`~headrace.pipeline.Samples`): a sample is augmented the same way on
any host, worker or resumed run, and differently in every epoch (its sample
number differs).
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from headrace import errors
from headrace.formats import _ragged
from headrace.io._pool import SharedPool as _SharedPool
from headrace.io._pool import usable_cpus as _usable_cpus
from headrace.io._ranges import whole_number as _integer

if typing.TYPE_CHECKING:
    from headrace.pipeline import Samples

__all__ = [
    "CenterCrop",
    "RandomCrop",
    "RandomResizedCrop",
    "resize_threads",
    "set_resize_threads",
]

# Threads that resize a batch's images (Pillow releases the GIL while it resizes):
# the CPUs this process may use, at most 8 (on 16 cores 8 resized 1.32x faster than 2).
# Images of several channel counts: a PNG set mixing grey, RGB and RGBA files, as web
# scrapes do; FileSource converts them all as torchvision's default loader does.
_MODE_HINT = (
    " (images of several modes, as in a PNG set mixing grey, RGB and RGBA: read them with "
    "FileSource(..., image_mode='RGB'), as torchvision's loader reads them)"
)
# Pillow resizes "LA" and "RGBA" through premultiplied alpha, each colour scaled by
# the last band and back (an RGB-D array's colours changed by its depth: 200 came out
# 170 to 255); as "La" and "RGBa" (premultiplied already, to Pillow) every band is
# resized alone, as grey and RGB are: 2- and 4-channel uint8 images are read as these.
_BAND_BY_BAND = {2: "La", 4: "RGBa"}
# What Pillow resizes: 8 bits (L, RGB...), 16-bit grey (I;16), 32-bit float grey (F),
# 32-bit signed grey (I); float16 through float32 (Pillow has no half floats), int8 and
# int16 through int32 (Image.fromarray read int8 -5 as 251): every value exact in the
# wider type, and bilinear's weights are a convex combination, so what comes back lies
# between the inputs' least and greatest and fits the narrower type again.
_RESIZES = (np.uint8, np.uint16, np.float32, np.float16, np.int8, np.int16, np.int32)
_WIDENED: dict[np.dtype[Any], type[np.generic]] = {
    np.dtype(np.float16): np.float32,
    np.dtype(np.int8): np.int32,
    np.dtype(np.int16): np.int32,
}
#: How RandomResizedCrop and CenterCrop resize: Pillow's (and torchvision's) bilinear, or
#: nearest neighbour, for masks of class ids.
Interpolation = typing.Literal["bilinear", "nearest"]
_resize = _SharedPool("headrace-resize", "HEADRACE_RESIZE_THREADS", min(8, _usable_cpus()))


def resize_threads() -> int:
    """How many threads resize images (``HEADRACE_RESIZE_THREADS`` sets the default)."""
    return _resize.threads


def set_resize_threads(n: int) -> None:
    """Resize with ``n`` threads from now on (resizes under way finish on the old ones)."""
    _resize.resize(n)


@dataclass(frozen=True, slots=True)
class RandomCrop:
    """Crop every image of ``key`` to ``size`` = (height, width) at a random offset.

    Images of any size in one batch (a stacked ``(B, H, W[, C])`` array, or
    the ragged ``object`` array plus ``<key>_shape`` that a file source gives
    for images of different sizes) become one ``(B, height, width[, C])``
    array; ``<key>_shape`` is dropped. ``flip``: mirror left-right with
    probability 1/2. An image smaller than ``size`` in a dimension is placed
    in the middle of that dimension and the rest filled with ``fill``.
    Offsets and flips are drawn from each sample's own generator. Channels-first
    ``(C, H, W)`` images of 1 to 4 channels are refused, not cropped as ``(H, W, C)``.
    """

    size: tuple[int, int]
    key: str = "image"
    flip: bool = True
    fill: int = 0

    def __post_init__(self) -> None:
        _check_size(self)
        fill: Any = self.fill
        if isinstance(fill, bool) or not isinstance(fill, int | float | np.integer | np.floating):
            raise errors.ConfigError(
                f"RandomCrop fill must be a number, the value of the pixels an image "
                f"smaller than size leaves (got {fill!r}); e.g. fill=0."
            )

    def __call__(
        self, arrays: dict[str, NDArray[Any]], samples: Samples
    ) -> dict[str, NDArray[Any]]:
        images = _images(self, arrays)
        height, width = self.size
        out: NDArray[Any] | None = None
        for i, (img, rng) in enumerate(zip(images, samples.rngs(), strict=True)):
            img = np.asarray(img)
            if img.ndim not in (2, 3):
                raise errors.DataError(
                    f"RandomCrop: sample {int(samples.numbers[i])}'s {self.key!r} has shape "
                    f"{img.shape}; expected (height, width) or (height, width, channels)"
                )
            _check_channels_last(self, img, int(samples.numbers[i]))
            if out is None:
                out = _filled(self, (len(images), height, width, *img.shape[2:]), img, samples, i)
            elif img.shape[2:] != out.shape[3:] or _order(img) != out.dtype:
                raise errors.DataError(
                    f"RandomCrop: sample {int(samples.numbers[i])}'s {self.key!r} is "
                    f"{img.dtype} {img.shape}, the first was {out.dtype} with channels "
                    f"{out.shape[3:]}: one batch's images need the same channels and dtype"
                    f"{_unlike(img, out, False)}"
                )
            h, w = img.shape[:2]
            y = int(rng.integers(0, max(h - height, 0) + 1))
            x = int(rng.integers(0, max(w - width, 0) + 1))
            crop = img[y : y + height, x : x + width]
            ch, cw = crop.shape[:2]
            oy, ox = (height - ch) // 2, (width - cw) // 2
            dest = out[i, oy : oy + ch, ox : ox + cw]
            if self.flip and rng.random() < 0.5:
                _copy_mirrored(dest, crop)
            else:
                dest[...] = crop
        return _replaced(arrays, self.key, out, self.size)


@dataclass(frozen=True, slots=True)
class RandomResizedCrop:
    """torchvision's ``RandomResizedCrop`` (+ flip): the usual ImageNet-style augmentation.

    Per image: a region of ``scale`` (fraction of the area) and ``ratio``
    (width / height, log-uniform) at a random place, ten tries as torchvision
    draws them, else a centre crop; resized to ``size`` = (height, width)
    with bilinear interpolation (Pillow, the ``images`` extra); mirrored
    left-right with probability 1/2 when ``flip``. uint8 or uint16 images (16-bit
    PNGs: each channel resized as Pillow's 16-bit grey ``I;16``; uint8 of more than 4
    channels each as grey ``L``), float32 or float16 (depth maps, normalised images:
    each channel as Pillow's float grey ``F``, float16 through float32; a NaN or inf
    spreads to the output pixels whose filter reaches it), grey ``(H, W)``
    or ``(H, W, C)``; the batch gets one ``(B, height, width[, C])`` array of their
    dtype and loses ``<key>_shape``. float64 is refused: Pillow would resize it as
    float32, so cast it first. int8, int16 and int32 (elevation tiles, CT slices,
    class-id masks) each channel as Pillow's 32-bit signed grey ``I``, int8 and int16
    through int32 (bilinear rounded as Pillow rounds, half away from zero, and within the
    inputs' range); uint32, int64 and uint64 are refused naming the cast (``I`` is
    signed 32-bit). Every draw is from the sample's own generator.
    No channel changes another: 2 and 4 channels (grey + alpha, RGBA, RGB-D) are
    resized band by band, not through the premultiplied alpha of Pillow's own ``LA``
    and ``RGBA`` resize (the same pixels where alpha is 255). Channels-first
    ``(C, H, W)`` images of 1 to 4 channels are refused, not cropped as ``(H, W, C)``.
    ``interpolation="nearest"`` resizes by nearest neighbour (torchvision's
    ``InterpolationMode.NEAREST``): for a segmentation mask, whose class ids bilinear
    would blend (3 beside 7 made 5). Two crops of same-sized images (an image and its
    mask, by ``key``) draw the same region and flip: each call's generators are fresh.
    """

    size: tuple[int, int]
    scale: tuple[float, float] = (0.08, 1.0)
    ratio: tuple[float, float] = (3 / 4, 4 / 3)
    key: str = "image"
    flip: bool = True
    interpolation: Interpolation = "bilinear"

    def __post_init__(self) -> None:
        _check_size(self)
        _check_interpolation(self)
        lo, hi = self.scale
        # Named, with the fix: torchvision only warns of a reversed range and then fails
        # at the first image with torch's "uniform_ expects to return a [from, to) range".
        if not 0 < lo <= hi <= 1:
            raise errors.ConfigError(
                f"RandomResizedCrop scale must satisfy 0 < min <= max <= 1, the least and "
                f"greatest fractions of an image's area a region takes (got {self.scale}); "
                "e.g. (0.08, 1.0), torchvision's default."
            )
        if not 0 < self.ratio[0] <= self.ratio[1]:
            raise errors.ConfigError(
                f"RandomResizedCrop ratio must satisfy 0 < min <= max, the narrowest and widest "
                f"width / height of a region (got {self.ratio}); e.g. (3/4, 4/3), "
                "torchvision's default."
            )
        if not np.isfinite(self.ratio[1]):  # NumPy's "range exceeds valid bounds" at a draw
            raise errors.ConfigError(
                f"ratio must be finite, the widest width / height a region may have (got "
                f"{self.ratio}); e.g. (3/4, 4/3)."
            )

    def region(self, height: int, width: int, rng: np.random.Generator) -> tuple[int, ...]:
        """``(top, left, h, w)`` of the region to crop from a ``height x width`` image."""
        area = height * width
        log_ratio = (np.log(self.ratio[0]), np.log(self.ratio[1]))
        for _ in range(10):
            target = area * rng.uniform(*self.scale)
            aspect = float(np.exp(rng.uniform(*log_ratio)))
            w = round(float(np.sqrt(target * aspect)))
            h = round(float(np.sqrt(target / aspect)))
            if 0 < w <= width and 0 < h <= height:
                top = int(rng.integers(0, height - h + 1))
                left = int(rng.integers(0, width - w + 1))
                return top, left, h, w
        shape_ratio = width / height  # no luck: the centre, clipped to the ratio range
        # At least a pixel: a side that rounds to 0 (a 10 x 1 image, ratio (3, 4)) made an
        # empty region, which Pillow resized to zeros whatever the image held.
        if shape_ratio < self.ratio[0]:
            w, h = width, max(round(width / self.ratio[0]), 1)
        elif shape_ratio > self.ratio[1]:
            h, w = height, max(round(height * self.ratio[1]), 1)
        else:
            h, w = height, width
        return (height - h) // 2, (width - w) // 2, h, w

    def __call__(
        self, arrays: dict[str, NDArray[Any]], samples: Samples
    ) -> dict[str, NDArray[Any]]:
        image_mod = _pillow(self)
        height, width = self.size
        images = [_native(img) for img in _images(self, arrays)]
        out: NDArray[Any] | None = None
        jobs = []
        for i, (img, rng) in enumerate(zip(images, samples.rngs(), strict=True)):
            _check_image(self, img, int(samples.numbers[i]), out)
            if out is None:
                out = np.empty((len(images), height, width, *img.shape[2:]), img.dtype)
            # Every draw here, in row order; the resizing (no draws) may run anywhere.
            region = self.region(img.shape[0], img.shape[1], rng)
            jobs.append((i, region, self.flip and rng.random() < 0.5))

        def resize(job: tuple[int, tuple[int, ...], bool]) -> None:
            assert out is not None
            i, (top, left, h, w), mirror = job
            crop = images[i][top : top + h, left : left + w]
            resized = _resized(image_mod, crop, width, height, mirror, self.interpolation)
            out[i] = resized.reshape(out.shape[1:])

        _on_threads(resize, jobs)
        return _replaced(arrays, self.key, out, self.size)


@dataclass(frozen=True, slots=True)
class CenterCrop:
    """torchvision's evaluation transform: ``Resize(resize)`` then ``CenterCrop(size)``.

    ``resize``: an integer resizes each image so its shorter side has that many pixels
    (the longer one ``int(resize * long / short)``), a ``(height, width)`` to that size;
    bilinear, with Pillow, as torchvision resizes a PIL image (the dtypes and channels
    :class:`RandomResizedCrop` resizes, as it resizes them); ``None``: no resize, and
    images of any dtype.
    Then the centre ``size`` = (height, width) is cut out, its corner at
    ``round((H - height) / 2)`` as torchvision rounds it; an image smaller than
    ``size`` is padded with zeros as torchvision pads it first. The same images as
    ``Compose([Resize(resize), CenterCrop(size)])`` on the PIL images, in one
    ``(B, height, width[, C])`` array; ``<key>_shape`` is dropped. No randomness: a
    sample's crop is the same in every epoch. Channels-first ``(C, H, W)`` images of 1
    to 4 channels are refused, as by :class:`RandomCrop`. ``interpolation="nearest"``:
    as :class:`RandomResizedCrop`'s (a segmentation mask's).
    """

    size: tuple[int, int]
    resize: int | tuple[int, int] | None = None
    key: str = "image"
    interpolation: Interpolation = "bilinear"

    def __post_init__(self) -> None:
        _check_size(self)
        _check_interpolation(self)
        r: Any = self.resize
        fine = (
            r is None
            or (_integer(r) and r >= 1)
            or (
                isinstance(r, tuple | list)
                and len(r) == 2
                and all(_integer(v) and v >= 1 for v in r)
            )
        )
        if not fine:
            raise errors.ConfigError(
                "CenterCrop resize must be an integer (the shorter side), (height, width), "
                f"or None (got {r!r})."
            )
        # Plain ints (a NumPy integer from a config array too), a list kept as a tuple:
        # resized_size tells the two forms apart by isinstance(r, int).
        if r is not None:
            object.__setattr__(self, "resize", int(r) if _integer(r) else (int(r[0]), int(r[1])))

    def resized_size(self, height: int, width: int) -> tuple[int, int]:
        """(height, width) of an image of ``height x width`` after ``resize``."""
        r = self.resize
        if r is None:
            return height, width
        if isinstance(r, tuple):
            return r
        if width <= height:
            return int(r * height / width), r
        return r, int(r * width / height)

    def __call__(
        self, arrays: dict[str, NDArray[Any]], samples: Samples
    ) -> dict[str, NDArray[Any]]:
        height, width = self.size
        resizes = self.resize is not None
        images = [_native(img) if resizes else np.asarray(img) for img in _images(self, arrays)]
        out: NDArray[Any] | None = None
        for i, img in enumerate(images):
            _check_image(self, img, int(samples.numbers[i]), out, resizes)
            if out is None:  # native: NPY files of both byte orders crop alike
                out = np.zeros((len(images), height, width, *img.shape[2:]), _order(img))
        image_mod = _pillow(self) if self.resize is not None else None

        def crop(i: int) -> None:
            assert out is not None
            img = images[i]
            h, w = self.resized_size(*img.shape[:2])
            if image_mod is not None and (h, w) != img.shape[:2]:
                resized = _resized(image_mod, img, w, h, False, self.interpolation)
                img = resized.reshape(h, w, *img.shape[2:])
            # torchvision pads a side smaller than the crop (left/top by half, rounded
            # down), then cuts at round((padded - crop) / 2), Python's rounding (half to
            # even): the image's first row and column land at these places in out.
            ph, pw = max(height - h, 0), max(width - w, 0)
            top = round((h + ph - height) / 2.0) - ph // 2
            left = round((w + pw - width) / 2.0) - pw // 2
            ys, xs = max(top, 0), max(left, 0)  # the image's rows and columns kept
            ye, xe = min(top + height, h), min(left + width, w)
            out[i, ys - top : ye - top, xs - left : xe - left] = img[ys:ye, xs:xe]

        _on_threads(crop, range(len(images)))
        return _replaced(arrays, self.key, out, self.size)


def _pillow(t: RandomResizedCrop | CenterCrop) -> Any:
    """``PIL.Image``, which resizes (the ``images`` extra)."""
    try:
        from PIL import Image
    except ImportError as exc:  # pragma: no cover - the images extra brings it
        raise errors.ConfigError(
            f"{type(t).__name__} resizes with Pillow: pip install 'headrace[images]'"
        ) from exc
    return Image


def _check_image(
    t: RandomResizedCrop | CenterCrop,
    img: NDArray[Any],
    number: int,
    out: NDArray[Any] | None,
    resizes: bool = True,
) -> None:
    """Refuse an image Pillow cannot resize (where ``resizes``: else any dtype), or one
    unlike the batch's first (``out``)."""
    name = type(t).__name__
    if img.ndim in (2, 3) and resizes and img.dtype == np.float64:
        # Pillow's float mode is 32-bit: Image.fromarray narrows float64 without a word
        # (1 + 1e-3 noise came back 6e-8 off), so float64 out would hold float32's
        # precision. Models take float32; the cast at the source halves the bytes too.
        raise errors.DataError(
            f"{name}: sample {number}'s {t.key!r} is float64 {img.shape}, which it would "
            "resize with float32 precision (Pillow has no 64-bit float mode); cast the "
            "images first, image.astype(np.float32) (in Mapped(source, fn) or when "
            "writing them), or crop without resizing (RandomCrop, CenterCrop(resize=None))"
        )
    if img.ndim in (2, 3) and resizes and img.dtype in (np.uint32, np.int64, np.uint64):
        # Pillow's integer mode "I" is 32-bit signed: Image.fromarray wrapped uint32
        # 3e9 to -1294967296 without a word, and has no mode for 64 bits at all.
        raise errors.DataError(
            f"{name}: sample {number}'s {t.key!r} is {img.dtype} {img.shape}, which it cannot "
            "resize: Pillow's integer mode is 32-bit signed (int32). Cast the images first, "
            "image.astype(np.int32) where every value fits (class ids do), else "
            "image.astype(np.float32) (in Mapped(source, fn) or when writing them), or crop "
            "without resizing (RandomCrop, CenterCrop(resize=None))"
        )
    if img.ndim not in (2, 3) or (resizes and img.dtype not in _RESIZES):
        takes = (
            "resizes uint8, uint16, float32 or float16, and int8, int16 or int32,"
            if resizes
            else "crops"
        )
        raise errors.DataError(
            f"{name}: sample {number}'s {t.key!r} is {img.dtype} {img.shape}; it {takes} "
            "(H, W) or (H, W, C) images"
        )
    _check_channels_last(t, img, number)
    if resizes and 0 in img.shape[:2]:  # a resize's scale divides by its sides
        raise errors.DataError(
            f"{name}: sample {number}'s {t.key!r} is {img.dtype} {img.shape}, an image of no "
            "pixels, which it cannot resize; leave such rows out (Filtered(source, keep))"
        )
    if out is not None and (img.shape[2:] != out.shape[3:] or _order(img) != out.dtype):
        raise errors.DataError(
            f"{name}: sample {number}'s {t.key!r} is {img.dtype} {img.shape}, the first was "
            f"{out.dtype} with channels {out.shape[3:]}{_unlike(img, out, resizes)}"
        )


def _unlike(img: NDArray[Any], out: NDArray[Any], resizes: bool) -> str:
    """What to do about an image unlike the batch's first (``out``): channel counts that
    differ come from a PNG set of several modes; a dtype alone from files written as two
    (NPY of float32 and float16), which a cast to one makes alike."""
    if img.shape[2:] != out.shape[3:]:
        return _MODE_HINT
    common = np.result_type(_order(img), out.dtype)
    if resizes and common not in _RESIZES:  # int32 and float32 make float64, refused
        common = np.dtype(np.float32)
    return (
        f" (images of two dtypes: cast them to one, image.astype(np.{common.name}), "
        "in Mapped(source, fn) or when writing them)"
    )


def _check_channels_last(
    t: RandomCrop | RandomResizedCrop | CenterCrop, img: NDArray[Any], number: int
) -> None:
    """Refuse an image that is plainly channels first, ``(C, H, W)`` as PyTorch and
    rasterio hold them: 1 to 4 "rows" (an image's channel counts) of more than 4 pixels
    of more than 4 "channels" (``(3, 224, 224)`` was cropped or resized as 3 rows of 224
    pixels, 224 channels, into nonsense). Channels first of more than 4 bands cannot be
    told from an image's ``(H, W, C)``, and are taken as that."""
    if img.ndim == 3 and img.shape[0] <= 4 and min(img.shape[1:]) > 4:
        raise errors.DataError(
            f"{type(t).__name__}: sample {number}'s {t.key!r} is {img.dtype} {img.shape}: "
            f"channels first (C, H, W), it seems, where it takes (H, W, C) images (or "
            f"{img.shape[0]} rows of {img.shape[2]} channels, which it will not guess); "
            "store them as (H, W, C), or move the axis before this transform "
            "(np.moveaxis(image, 0, -1))"
        )


def _on_threads(fn: Any, jobs: Any) -> None:
    """``fn(job)`` for every job, on the resize threads where there are several: Pillow
    resizes without the GIL."""
    jobs = list(jobs)
    if len(jobs) > 1:
        list(_resize.get().map(fn, jobs))
    else:
        for job in jobs:
            fn(job)


def _resized(
    image_mod: Any,
    a: NDArray[Any],
    width: int,
    height: int,
    mirror: bool,
    interpolation: Interpolation = "bilinear",
) -> NDArray[Any]:
    """``a`` resized bilinearly by Pillow to ``width x height`` and ``mirror``-ed
    left-right by Pillow (a mirrored copy through NumPy moves a pixel at a time: 153 us
    for 224 x 224 x 3 against Pillow's 19, measured in isolation). uint8 grey or colour;
    uint16 as Pillow's 16-bit grey ``I;16`` and float32 as its float grey ``F``, a
    colour image channel by channel (Pillow has no 16-bit or float colour mode), and so
    is uint8 of more than 4 channels (multispectral bands: Pillow has no mode for them,
    and said only "Cannot handle this data type"). float16 as float32, rounded back;
    int32 as Pillow's signed grey ``I``, int8 and int16 through it (see :data:`_RESIZES`).
    No band changes another: 2 and 4 channels are resized as "La" and "RGBa" (see
    :data:`_BAND_BY_BAND`), not through Pillow's premultiplied alpha."""
    if a.dtype in _WIDENED:  # float16: "Cannot handle this data type: (1, 1), <f2"
        wide = a.astype(_WIDENED[a.dtype])
        return _resized(image_mod, wide, width, height, mirror, interpolation).astype(a.dtype)
    if a.ndim == 3 and a.shape[2] > 1 and (a.dtype != np.uint8 or a.shape[2] > 4):
        planes = [
            _resized(image_mod, a[..., c], width, height, mirror, interpolation)
            for c in range(a.shape[2])
        ]
        return np.stack(planes, axis=-1)
    one = np.ascontiguousarray(a[..., 0] if a.ndim == 3 and a.shape[2] == 1 else a)
    if one.ndim == 3 and one.shape[2] in _BAND_BY_BAND:
        mode = _BAND_BY_BAND[one.shape[2]]
        size = (one.shape[1], one.shape[0])
        pil = image_mod.frombuffer(mode, size, one, "raw", mode, 0, 1)
    else:
        pil = image_mod.fromarray(one)
    nearest = interpolation == "nearest"
    resampling = image_mod.Resampling
    pil = pil.resize((width, height), resampling.NEAREST if nearest else resampling.BILINEAR)
    if mirror:
        pil = pil.transpose(image_mod.Transpose.FLIP_LEFT_RIGHT)
    return np.asarray(pil)


def _check_interpolation(t: RandomResizedCrop | CenterCrop) -> None:
    if t.interpolation not in typing.get_args(Interpolation):
        raise errors.ConfigError(
            f"{type(t).__name__} interpolation must be 'bilinear' (images) or 'nearest' "
            f"(segmentation masks, whose class ids must not blend) (got {t.interpolation!r})."
        )


def _check_size(t: RandomCrop | RandomResizedCrop | CenterCrop) -> None:
    size: Any = t.size
    if _integer(size):  # a square, as torchvision takes it
        size = (size, size)
    elif not (isinstance(size, tuple | list) and len(size) == 2):
        raise errors.ConfigError(
            f"{type(t).__name__} size must be (height, width) or one integer (got {size!r})."
        )
    h, w = size
    if not (_integer(h) and _integer(w) and h >= 1 and w >= 1):
        raise errors.ConfigError(
            f"{type(t).__name__} size must be two integers >= 1 (got {t.size!r})."
        )
    # Plain ints: a NumPy integer (a size read from a config array) would otherwise
    # be refused, or kept in the repr and the pickles of the transform.
    object.__setattr__(t, "size", (int(h), int(w)))


def _images(
    t: RandomCrop | RandomResizedCrop | CenterCrop, arrays: dict[str, NDArray[Any]]
) -> list[Any]:
    if t.key not in arrays:
        raise errors.ConfigError(
            f"{type(t).__name__}: the batch has no {t.key!r} (keys: {sorted(arrays)}); "
            "set key= to the images' name"
        )
    return list(arrays[t.key])


def _replaced(
    arrays: dict[str, NDArray[Any]], key: str, out: NDArray[Any] | None, size: tuple[int, int]
) -> dict[str, NDArray[Any]]:
    """``arrays`` with ``key`` now ``out`` (one array) and ``<key>_shape`` gone; with no
    rows (``out`` None), the layout rows would have where the images say it (a stacked
    ``(0, H, W, C)``): a mixture compares its sources by an empty read, and an empty
    ``(0, h, w)`` uint8 was refused against the ``(h, w, 3)`` of the first real read."""
    result = {k: v for k, v in arrays.items() if k not in (key, f"{key}_shape")}
    if out is None:
        given = arrays[key]
        if isinstance(given, np.ndarray) and given.dtype != object and given.ndim >= 3:
            out = np.zeros((0, *size, *given.shape[3:]), dtype=given.dtype.newbyteorder("="))
        else:  # images of their own shapes (files): nothing says their channels
            out = np.zeros((0, *size), dtype=np.uint8)
    result[key] = out
    return result


def _order(img: NDArray[Any]) -> np.dtype[Any]:
    """``img``'s dtype in this machine's byte order."""
    return img.dtype.newbyteorder("=")


def _native(img: Any) -> NDArray[Any]:
    """``img`` as an array in this machine's byte order: a big-endian ``>u2`` (a
    ``.npy`` written so) is uint16 to Pillow too, not refused as "not uint16"."""
    a = np.asarray(img)
    return a if a.dtype.isnative else a.astype(a.dtype.newbyteorder("="))


def _filled(
    t: RandomCrop, shape: tuple[int, ...], img: NDArray[Any], samples: Samples, i: int
) -> NDArray[Any]:
    """The batch's output, ``t.fill`` everywhere; a fill the images' dtype cannot hold
    named with the sample (np.full's unsafe cast wrapped a NumPy integer and truncated a
    float, and its OverflowError for a Python int named neither)."""
    try:
        _ragged.check_pad_value(t.fill, img.dtype)
    except errors.ConfigError:
        allowed = ""
        if img.dtype.kind in "ui":
            info = np.iinfo(img.dtype)
            allowed = f", which holds {info.min} to {info.max}"
        raise errors.DataError(
            f"RandomCrop: fill={t.fill!r} does not fit the images: sample "
            f"{int(samples.numbers[i])}'s {t.key!r} is {img.dtype} {img.shape}{allowed}; "
            "give a fill of that range (e.g. fill=0)"
        ) from None
    # Native: a batch of NPY images of both byte orders (files written on machines of
    # both) is one array of values, as RandomResizedCrop gives it; ">u2" was refused.
    return np.full(shape, t.fill, _order(img))


def _copy_mirrored(dest: NDArray[Any], crop: NDArray[Any]) -> None:
    """``dest[...] = crop[:, ::-1]``, pixels copied as single items where the layout allows.

    NumPy copies a mirrored ``(H, W, 3)`` uint8 crop one byte per inner loop:
    255 us for 224 x 224 here; as ``(H, W)`` items of 3 bytes, 154 us
    (measured in isolation).
    """
    # Bytes as they are: only where no byte order changes (a big-endian crop into native).
    if (
        crop.ndim == 3
        and crop.dtype == dest.dtype
        and crop.strides[2] == crop.itemsize
        and dest.strides[2] == dest.itemsize
    ):
        item = np.dtype((np.void, crop.shape[2] * crop.itemsize))
        try:
            dest.view(item)[...] = crop.view(item)[:, ::-1]
            return
        except ValueError:  # a layout NumPy will not view that way
            pass
    dest[...] = crop[:, ::-1]
