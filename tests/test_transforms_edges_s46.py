"""Edge cases of transforms, Mapped and Filtered found by a review (session 46)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray

from headrace.errors import ConfigError, DataError
from headrace.formats import TableSource, TokenSource
from headrace.pipeline import Filtered, Loader, Mapped, Mixture, Samples
from headrace.transforms import CenterCrop, RandomCrop, RandomResizedCrop

Arrays = dict[str, NDArray[Any]]


def numbers(n: int) -> Samples:
    return Samples(0, np.arange(n, dtype=np.int64))


@pytest.fixture(scope="module")
def tokens(tmp_path_factory: pytest.TempPathFactory) -> TokenSource:
    path = tmp_path_factory.mktemp("edges") / "t.bin"
    np.random.default_rng(0).integers(0, 50_000, 20_000, dtype=np.uint16).tofile(path)
    return TokenSource(str(path), dtype="uint16", context=16)


def random_half(arrays: Arrays, samples: Samples) -> NDArray[np.bool_]:
    """Keep a random half of the samples (a subsample of a noisy source)."""
    return np.array([rng.random() < 0.5 for rng in samples.rngs()], dtype=bool)


def coin(arrays: Arrays, samples: Samples) -> Arrays:
    """A flip's coin per sample, as RandomCrop or a mask draws it."""
    return {**arrays, "flip": np.array([rng.random() < 0.5 for rng in samples.rngs()])}


def test_a_random_keep_does_not_decide_the_loader_transforms_draws(tokens: TokenSource) -> None:
    # keep drew from the loader transform's generators: every sample kept as itself
    # came out flipped and every place a stand-in took never did (the coin was the
    # keep's own draw), whatever the transform.
    seen: list[NDArray[np.bool_]] = []

    def kept_here(arrays: Arrays, samples: Samples) -> NDArray[np.bool_]:
        ok = random_half(arrays, samples)
        seen.append(ok)
        return ok

    with Loader(Filtered(tokens, kept_here), batch_size=64, steps=1, transform=coin) as ld:
        flips = next(iter(ld))["flip"]
    kept = seen[0]  # the first keep call judges the step's own samples
    assert 5 < kept.sum() < 59
    assert 0 < flips[kept].mean() < 1 and 0 < flips[~kept].mean() < 1


def test_keep_layers_draw_apart(tokens: TokenSource) -> None:
    # Two random filters stacked: the outer one drew what the inner one had drawn, so
    # it kept every sample the inner one kept (half the data kept, not a quarter).
    draws: dict[str, list[float]] = {}

    def record(name: str) -> Any:
        def keep(arrays: Arrays, samples: Samples) -> NDArray[np.bool_]:
            draws.setdefault(name, []).extend(rng.random() for rng in samples.rngs())
            return np.ones(len(samples), dtype=bool)

        return keep

    Filtered(Filtered(tokens, record("inner")), record("outer")).read(0, np.arange(8))
    assert draws["inner"] != draws["outer"]


def draws_as(name: str, draws: dict[str, list[float]]) -> Any:
    def fn(arrays: Arrays, samples: Samples) -> Arrays:
        draws[name] = [rng.random() for rng in samples.rngs()]
        return arrays

    return fn


def test_a_mapped_source_over_a_filtered_mapped_one_draws_its_own_stream(
    tokens: TokenSource,
) -> None:
    # The outer Mapped counted only a Mapped right below it: through a Filtered it took
    # stream 1, the inner one's, and its crop drew the inner one's very offsets.
    draws: dict[str, list[float]] = {}
    keep_all = lambda arrays, samples: np.ones(len(samples), dtype=bool)  # noqa: E731
    inner = Mapped(tokens, draws_as("inner", draws))
    Mapped(Filtered(inner, keep_all), draws_as("outer", draws)).read(0, np.arange(4))
    assert draws["inner"] != draws["outer"]
    # Mapped(Mapped(...)) and Mapped(Filtered(...)) keep the streams they had.
    Mapped(Mapped(tokens, draws_as("a", draws)), draws_as("b", draws)).read(0, np.arange(4))
    Mapped(Filtered(tokens, keep_all), draws_as("c", draws)).read(0, np.arange(4))
    assert draws["a"] == draws["inner"] == draws["c"] != draws["b"] == draws["outer"]


# -- zero rows: a mixture's layout check ----------------------------------------------


@pytest.mark.parametrize(
    "t", [RandomCrop((4, 5)), RandomResizedCrop((4, 5)), CenterCrop((4, 5), resize=6)]
)
@pytest.mark.parametrize(("trail", "dtype"), [((3,), np.uint8), ((), np.uint16), ((1,), np.uint8)])
def test_zero_rows_keep_the_images_channels_and_dtype(
    t: Any, trail: tuple[int, ...], dtype: Any
) -> None:
    # The empty read a mixture checks layouts with gave (0, h, w) uint8 whatever the
    # images were, and the first real read's (h, w, 3) was refused against it.
    got = t({"image": np.zeros((0, 9, 8, *trail), dtype), "y": np.zeros(0)}, numbers(0))
    assert got["image"].shape == (0, 4, 5, *trail) and got["image"].dtype == dtype


def test_a_mixture_of_image_tables_cropped_by_mapped_sources(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    for name in ("a", "b"):
        pixels = pa.array(rng.integers(0, 256, 16 * 12 * 12 * 3, dtype=np.uint8))
        col = pa.FixedSizeListArray.from_arrays(pixels, 3)
        col = pa.FixedSizeListArray.from_arrays(pa.FixedSizeListArray.from_arrays(col, 12), 12)
        pq.write_table(pa.table({"img": col}), tmp_path / f"{name}.parquet")
    mix = Mixture(
        {
            "a": Mapped(TableSource(str(tmp_path / "a.parquet")), RandomCrop(8, key="img")),
            "b": Mapped(TableSource(str(tmp_path / "b.parquet")), CenterCrop(8, key="img")),
        },
        [0.5, 0.5],
        batch_size=4,
    )
    with Loader(mix, batch_size=4, steps=2) as ld:
        assert [b["img"].shape for b in ld] == [(4, 8, 8, 3)] * 2


# -- images Pillow has no mode for ----------------------------------------------------


@pytest.mark.parametrize("t", [RandomResizedCrop((5, 6), scale=(0.5, 1)), CenterCrop(5, resize=6)])
def test_images_of_more_than_four_channels_are_resized_channel_by_channel(t: Any) -> None:
    # Multispectral uint8 (5 bands): Pillow has no such mode, and its TypeError ("Cannot
    # handle this data type: (1, 1, 5), |u1") named no sample.
    imgs = np.random.default_rng(1).integers(0, 256, (3, 10, 12, 5), dtype=np.uint8)
    got = t({"image": imgs}, numbers(3))["image"]
    assert got.shape == (3, *t.size, 5) and got.dtype == np.uint8
    # Each band as Pillow resizes grey (checked against Pillow by test_transform.py): the
    # same region, resize and flip as the band alone through the transform.
    for c in range(5):
        band = t({"image": np.ascontiguousarray(imgs[..., c])}, numbers(3))["image"]
        assert np.array_equal(got[..., c], band), c


def test_big_endian_16_bit_images_resize_as_16_bit() -> None:
    # ">u2" (a big-endian .npy) was refused as "is >u2 ...; it resizes uint8 or uint16".
    imgs = np.random.default_rng(2).integers(0, 65536, (2, 10, 12, 3), dtype=np.uint16)
    for t in (RandomResizedCrop((5, 6)), CenterCrop(5, resize=6)):
        want = t({"image": imgs}, numbers(2))["image"]
        got = t({"image": imgs.astype(">u2")}, numbers(2))["image"]
        assert got.dtype == np.uint16 and np.array_equal(got, want)


# -- errors name the sample -----------------------------------------------------------


@pytest.mark.parametrize("t", [RandomResizedCrop((4, 4)), CenterCrop(4, resize=5)])
def test_an_empty_image_is_refused_naming_its_sample(t: Any) -> None:
    imgs = np.empty(2, dtype=object)
    imgs[0], imgs[1] = np.zeros((6, 6, 3), np.uint8), np.zeros((0, 6, 3), np.uint8)
    with pytest.raises(DataError, match=r"sample 1's 'image' is uint8 \(0, 6, 3\).* no pixels"):
        t({"image": imgs}, numbers(2))


def test_a_fill_the_images_dtype_cannot_hold_is_refused_naming_the_sample() -> None:
    with pytest.raises(
        DataError, match=r"RandomCrop: fill=-1 .* sample 0's 'image' is uint8 .* 0 to 255"
    ):
        RandomCrop(8, fill=-1)({"image": np.zeros((1, 4, 4, 3), np.uint8)}, numbers(1))
    with pytest.raises(ConfigError, match="fill must be a number"):
        RandomCrop(8, fill="black")  # type: ignore[arg-type]


def test_numpy_integer_sizes_are_taken() -> None:
    # A size read from a config array (np.int64) was refused "must be two integers".
    for t in (RandomCrop, RandomResizedCrop, CenterCrop):
        assert t(np.int64(6)).size == (6, 6) == t((np.int32(6), np.int64(6))).size
        assert type(t(np.int64(6)).size[0]) is int
    assert CenterCrop(4, resize=np.int64(8)).resize == 8
    assert CenterCrop(4, resize=(np.int64(8), 9)).resize == (8, 9)
    with pytest.raises(ConfigError, match="size must be two integers"):
        RandomCrop((True, 4))


def test_an_infinite_ratio_is_refused_when_made() -> None:
    # It failed at the first image that missed ten tries: "high - low range exceeds
    # valid bounds", from NumPy.
    with pytest.raises(ConfigError, match="ratio must be finite"):
        RandomResizedCrop(4, ratio=(1.0, float("inf")))


def failing(arrays: Arrays, samples: Samples) -> Arrays:
    if 37 in samples.numbers:
        raise ValueError("no such token")
    return arrays


@pytest.mark.parametrize("prefetch", [0, 8])
def test_a_transform_that_raises_names_itself_and_its_samples(
    tokens: TokenSource, prefetch: int
) -> None:
    # Its own ValueError alone: no word of the transform nor of which samples it had
    # (without read-ahead not even the step).
    with Loader(tokens, batch_size=8, steps=8, transform=failing, prefetch=prefetch) as ld:
        got = []
        with pytest.raises(ValueError, match="no such token") as info:
            got.extend(ld)
    assert len(got) == 4
    notes = "\n".join(info.value.__notes__)
    assert "transform failing, on 8 sample(s) of seed 0: 32, 33, 34, 35, 36, ..." in notes
    with pytest.raises(ValueError, match="no such token") as info:
        Mapped(tokens, failing).read(0, np.arange(30, 40))
    assert "on 10 sample(s) of seed 0: 30, 31, 32, 33, 34, ..." in info.value.__notes__[0]
