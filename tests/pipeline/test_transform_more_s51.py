"""Transforms (session 51): a slow one named by the stall warning; one whose output
layout follows the rows of a call refused; Mapped fns and Filtered keeps that draw
from a process-wide generator told so."""

from __future__ import annotations

import random
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray
from PIL import Image

from headrace.errors import ConfigError
from headrace.formats import FileSource, TokenSource
from headrace.pipeline import Filtered, Loader, Mapped, Samples, _transform
from headrace.transforms import RandomCrop

Arrays = dict[str, NDArray[Any]]


@pytest.fixture(autouse=True)
def checked_afresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's functions checked for draws from their first call."""
    monkeypatch.setattr(_transform, "_CHECKED", {})


@pytest.fixture
def tokens(tmp_path: Path) -> Path:
    path = tmp_path / "t.bin"
    np.random.default_rng(0).integers(0, 50_000, 1 << 14, dtype=np.uint16).tofile(path)
    return path


@pytest.fixture(scope="module")
def pngs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Grey PNGs of one size, 8-bit and 16-bit by turns, as Pillow writes them."""
    root = tmp_path_factory.mktemp("pngs")
    rng = np.random.default_rng(1)
    for i in range(16):
        if i % 3:
            a = rng.integers(0, 256, (8, 6), dtype=np.uint8)
        else:
            a = rng.integers(0, 65_536, (8, 6), dtype=np.uint16)
        Image.fromarray(a).save(root / f"{i:02}.png")
    return root


@pytest.fixture(scope="module")
def jpegs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """RGB JPEGs of several sizes in class folders, as Pillow writes them."""
    root = tmp_path_factory.mktemp("jpegs")
    rng = np.random.default_rng(2)
    for c in ("a", "b"):
        (root / c).mkdir()
        for i in range(8):
            h, w = (int(v) for v in rng.integers(10, 30, 2))
            Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(
                root / c / f"{i}.jpg"
            )
    return root


def slow_augment(arrays: Arrays, samples: Samples) -> Arrays:
    time.sleep(0.3)  # a heavy Python augmentation
    return arrays


@pytest.mark.parametrize("prefetch", [0, 2])
def test_a_stall_in_a_slow_transform_names_it_and_what_to_do(tokens: Path, prefetch: int) -> None:
    """The warning said "no read ... in flight (the source may be decoding...)": the
    time was the transform's, which it did not name."""
    src = TokenSource(tokens, dtype="uint16", context=16)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with Loader(
            src,
            batch_size=4,
            steps=2,
            chunk_steps=1,
            prefetch=prefetch,
            stall_warn_s=0.05,
            transform=slow_augment,
        ) as loader:
            for _ in loader:
                pass
    said = [str(w.message) for w in caught if "no batch for" in str(w.message)]
    assert said, [str(w.message) for w in caught]
    assert any("transform slow_augment" in s for s in said), said
    named = next(s for s in said if "transform slow_augment" in s)
    assert "num_workers" in named and "cheaper" in named
    assert "the source may be decoding" not in named


def stacked(arrays: Arrays, samples: Samples) -> Arrays:
    """np.stack of each call's rows: uint16 where a 16-bit row is among them."""
    return {**arrays, "image": np.stack(list(arrays["image"]))}


def test_a_transform_whose_dtype_follows_the_calls_rows_is_refused(pngs: Path) -> None:
    """With chunk_steps=1 a step of 8-bit images came out uint8 and one beside a 16-bit
    image uint16 (in one chunk of every step: uint16 throughout), without a word."""
    src = FileSource(pngs, format="png", shuffle=False)
    with Loader(src, batch_size=2, steps=8, chunk_steps=1, transform=stacked) as loader:
        with pytest.raises(ConfigError) as e:
            for _ in loader:
                pass
    said = str(e.value)
    assert "transform stacked" in said and "'image'" in said
    assert "uint16" in said and "uint8" in said and "one dtype" in said


def padded(arrays: Arrays, samples: Samples) -> Arrays:
    """Each call's images padded to its own largest."""
    rows = list(arrays["image"])
    h = max(r.shape[0] for r in rows)
    w = max(r.shape[1] for r in rows)
    out = np.zeros((len(rows), h, w, 3), np.uint8)
    for o, r in zip(out, rows, strict=True):
        o[: r.shape[0], : r.shape[1]] = r
    return {"image": out, "label": arrays["label"]}


def test_a_transform_padding_to_the_calls_largest_is_refused(jpegs: Path) -> None:
    src = FileSource(jpegs, format="jpeg", labels="folders")
    with Loader(src, batch_size=2, steps=8, chunk_steps=2, transform=padded) as loader:
        with pytest.raises(ConfigError, match=r"transform padded .*'image'.*fixed") as e:
            for _ in loader:
                pass
    assert "chunk_steps" in str(e.value)


@pytest.fixture(scope="module")
def sized(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """RGB JPEGs of two sizes, 4 of one then 4 of the other, in name order."""
    root = tmp_path_factory.mktemp("sized")
    rng = np.random.default_rng(3)
    for i in range(16):
        h, w = (12, 16) if i // 4 % 2 else (20, 10)
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(root / f"{i:02}.jpg")
    return root


def relabelled(arrays: Arrays, samples: Samples) -> Arrays:
    """Images passed through as the source read them, labels mapped."""
    return {**arrays, "index": arrays["index"] + 1}


def as_float(arrays: Arrays, samples: Samples) -> Arrays:
    """Each image as float32, of the shape (and layout) the source gave it."""
    image = arrays["image"]
    if image.dtype != object:  # a read whose images agree: stacked by the source
        return {**arrays, "image": image.astype(np.float32) / 255}
    out = np.empty(len(image), object)
    out[:] = [row.astype(np.float32) / 255 for row in image]
    return {**arrays, "image": out}


@pytest.mark.parametrize("chunk_steps", [1, 2])
def test_transforms_of_a_fixed_layout_or_of_the_sources_own_are_taken(
    sized: Path, chunk_steps: int
) -> None:
    """Images of two sizes passed through, or cast (each read's stacked by the source,
    its samples agreeing), and a crop to one size are no transform's doing: taken."""
    for fn in (relabelled, as_float, RandomCrop((8, 8))):
        src = FileSource(sized, format="jpeg", shuffle=False)
        with Loader(src, batch_size=2, steps=8, chunk_steps=chunk_steps, transform=fn) as lo:
            shapes = {b["image"].shape[1:] for b in lo}
        assert shapes == (
            {(8, 8, 3)} if fn not in (relabelled, as_float) else {(20, 10, 3), (12, 16, 3)}
        )


def numpy_noise(arrays: Arrays, samples: Samples) -> Arrays:
    return {"x": arrays["x"] + np.random.randint(0, 2, arrays["x"].shape).astype(np.uint16)}


def random_half(arrays: Arrays, samples: Samples) -> NDArray[np.bool_]:
    return np.array([random.random() < 0.5 for _ in range(len(samples))])


def _runtime_warnings(loader: Loader) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with loader:
            for _ in loader:
                pass
    return [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]


def test_a_mapped_fn_drawing_from_a_process_wide_generator_is_told(tokens: Path) -> None:
    src = Mapped(TokenSource(tokens, dtype="uint16", context=16), numpy_noise)
    said = _runtime_warnings(Loader(src, batch_size=4, steps=6, chunk_steps=2, prefetch=0))
    assert len(said) == 1, said  # once, not a read
    assert "numpy_noise" in said[0] and "NumPy's global" in said[0]
    assert "samples.rngs()" in said[0]


def test_a_filtered_keep_drawing_from_a_process_wide_generator_is_told(tokens: Path) -> None:
    src = Filtered(TokenSource(tokens, dtype="uint16", context=16), random_half)
    said = _runtime_warnings(Loader(src, batch_size=4, steps=6, chunk_steps=2, prefetch=0))
    assert len(said) == 1, said
    assert "random_half" in said[0] and "keep" in said[0] and "Python's `random`" in said[0]
