"""Loader(transform=...): what a failing transform's error says (session 48)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray

from headrace.errors import ConfigError
from headrace.formats import TokenSource
from headrace.pipeline import Loader, Mapped, Samples
from headrace.transforms import CenterCrop, RandomCrop, RandomResizedCrop

L = 16


@pytest.fixture
def tokens(tmp_path: Path) -> Path:
    path = tmp_path / "t.bin"
    np.random.default_rng(0).integers(0, 50_000, 40 * L + 1, dtype=np.uint16).tofile(path)
    return path


def stop_at_13(arrays: dict[str, NDArray[Any]], samples: Samples) -> dict[str, NDArray[Any]]:
    if 13 in samples.numbers:
        next(iter([]))  # an exhausted iterator: StopIteration out of the transform
    return arrays


@pytest.mark.parametrize("prefetch", [0, 2])
def test_a_transform_raising_stop_iteration_is_named_with_its_samples(
    tokens: Path, prefetch: int
) -> None:
    """Out of the loader's generator, a StopIteration was Python's bare RuntimeError
    "generator raised StopIteration", naming neither the transform nor its samples."""
    src = TokenSource(tokens, dtype="uint16", context=L, shuffle=False)
    with Loader(src, batch_size=4, steps=6, prefetch=prefetch, transform=stop_at_13) as lo:
        it = iter(lo)
        for _ in range(3):  # samples 0-11
            next(it)
        with pytest.raises(RuntimeError, match=r"transform stop_at_13 raised StopIteration") as e:
            next(it)
    assert "12, 13, 14, 15" in str(e.value)
    assert "while reading step 3" in "\n".join(getattr(e.value, "__notes__", []))


@pytest.mark.parametrize("cls", [CenterCrop, RandomCrop, RandomResizedCrop])
def test_a_transform_class_not_made_is_refused_when_the_loader_is_made(
    tokens: Path, cls: type
) -> None:
    """``transform=CenterCrop`` (the class, for ``CenterCrop((224, 224))``) binds as
    ``fn(arrays, samples)`` (``size``, ``resize``): it was taken, and the first batch
    failed in the read-ahead thread with "size must be (height, width) (got {'image':
    array([[[...") about the size the user never gave."""
    src = TokenSource(tokens, dtype="uint16", context=L)
    with pytest.raises(ConfigError, match=rf"transform is the class {cls.__name__}.*\(\.\.\.\)"):
        Loader(src, batch_size=4, steps=2, transform=cls)
    with pytest.raises(ConfigError, match=rf"Mapped: fn is the class {cls.__name__}"):
        Mapped(src, cls)
    src.close()


class Relabelled(dict):  # type: ignore[type-arg]
    """A Mapping made from the arrays: a class that is itself a transform."""

    def __init__(self, arrays: dict[str, NDArray[Any]], samples: Samples) -> None:
        super().__init__(x=arrays["x"], label=arrays["y"][:, -1])


def test_a_class_whose_instances_are_the_batch_is_still_a_transform(tokens: Path) -> None:
    src = TokenSource(tokens, dtype="uint16", context=L, shuffle=False)
    with Loader(src, batch_size=4, steps=2, transform=Relabelled) as lo:
        batch = next(iter(lo))
    assert sorted(batch) == ["label", "x"] and batch["label"].shape == (4,)
