"""An ImageNet-style augmentation pipeline replays; one drawing from a process-wide
generator (``np.random``, ``random``, torch's) is told it will not.

A transform that draws from ``np.random.rand`` or ``random.random`` got draws that
depend on which process runs a chunk and what it drew before: the same seed gave other
bytes with 2 workers than with 0, and a fresh worker's other bytes each run, without a
word (until 2026-12-07)."""

from __future__ import annotations

import random
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray
from PIL import Image

from headrace.formats import FileSource
from headrace.pipeline import Loader, Samples, _transform
from headrace.transforms import RandomResizedCrop

MEAN = np.array([0.485, 0.456, 0.406], np.float32) * 255
STD = np.array([0.229, 0.224, 0.225], np.float32) * 255
CROP = RandomResizedCrop((24, 24))


@pytest.fixture(scope="module")
def jpegs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """JPEGs of several sizes in class folders, one grey, as Pillow writes them."""
    root = tmp_path_factory.mktemp("imgs")
    rng = np.random.default_rng(0)
    for c in ("n01", "n02"):
        (root / c).mkdir()
        for i in range(12):
            h, w = (int(v) for v in rng.integers(20, 70, 2))
            Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(
                root / c / f"{i}.jpg"
            )
    Image.fromarray(rng.integers(0, 256, (30, 40), dtype=np.uint8)).save(root / "n01" / "grey.jpg")
    return root


@pytest.fixture(autouse=True)
def checked_afresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's transforms checked for draws from their first chunk (a process checks
    a transform's first few chunks only)."""
    monkeypatch.setattr(_transform, "_CHECKED", {})


def normalised(arrays: dict[str, NDArray[Any]], samples: Samples) -> dict[str, NDArray[Any]]:
    """RandomResizedCrop (+ flip), then ToTensor + Normalize's arithmetic."""
    out = CROP(arrays, samples)
    out["image"] = (out["image"].astype(np.float32) - MEAN) / STD
    return out


def global_numpy(arrays: dict[str, NDArray[Any]], samples: Samples) -> dict[str, NDArray[Any]]:
    out = CROP(arrays, samples)
    out["image"] = out["image"] + np.random.randint(0, 2, out["image"].shape, dtype=np.uint8)
    return out


def global_random(arrays: dict[str, NDArray[Any]], samples: Samples) -> dict[str, NDArray[Any]]:
    out = CROP(arrays, samples)
    if random.random() < 0.5:
        out["image"] = np.ascontiguousarray(out["image"][:, ::-1])
    return out


def global_torch(arrays: dict[str, NDArray[Any]], samples: Samples) -> dict[str, NDArray[Any]]:
    import torch

    out = CROP(arrays, samples)
    out["image"] = out["image"] + np.uint8(int(torch.randint(0, 2, ())))
    return out


def batches(root: Path, transform: Any, **kw: Any) -> list[dict[str, NDArray[Any]]]:
    src = FileSource(root, format="jpeg", labels="folders", image_mode="RGB")
    with Loader(src, batch_size=4, seed=3, steps=14, transform=transform, **kw) as loader:
        return [{k: v.copy() for k, v in b.items()} for b in loader]


def test_a_normalised_crop_replays_on_any_chunking_and_hosts_and_differs_by_epoch(
    jpegs: Path,
) -> None:
    base = batches(jpegs, normalised)
    assert base[0]["image"].shape == (4, 24, 24, 3) and base[0]["image"].dtype == np.float32
    for kw in ({"chunk_steps": 1}, {"prefetch": 0, "chunk_steps": 5}):
        got = batches(jpegs, normalised, **kw)
        assert all(np.array_equal(a["image"], b["image"]) for a, b in zip(base, got, strict=True))
    halves = [batches(jpegs, normalised, rank=r, world_size=2) for r in (0, 1)]
    for a, b0, b1 in zip(base, *halves, strict=True):
        assert np.array_equal(a["image"], np.concatenate([b0["image"], b1["image"]]))
    # 25 samples an epoch, 56 read: a sample of epoch 0 is cropped otherwise in epoch 1.
    index = np.concatenate([b["index"] for b in base])
    images = np.concatenate([b["image"] for b in base])
    first = {int(n): i for i, n in reversed(list(enumerate(index.tolist())))}
    again = [(first[int(n)], i) for i, n in enumerate(index.tolist()) if first[int(n)] != i]
    assert again and not any(np.array_equal(images[a], images[b]) for a, b in again)


@pytest.mark.parametrize(
    ("transform", "named"),
    [(global_numpy, "NumPy's global"), (global_random, "Python's `random`")],
)
def test_a_transform_drawing_from_a_process_wide_generator_is_told_it_will_not_replay(
    jpegs: Path, transform: Any, named: str
) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        batches(jpegs, transform, chunk_steps=2, prefetch=0)
    said = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(said) == 1, said  # once, not a chunk
    assert transform.__qualname__ in said[0] and named in said[0]
    assert "samples.rngs()" in said[0] and "of seed 3" in said[0]


def test_a_transform_drawing_from_torchs_generator_is_told_too(jpegs: Path) -> None:
    pytest.importorskip("torch")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        batches(jpegs, global_torch, prefetch=0)
    said = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(said) == 1 and "torch's global" in said[0] and "global_torch" in said[0]


def test_a_transform_of_its_own_generators_is_not_warned(jpegs: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        batches(jpegs, normalised, chunk_steps=2)


def test_the_training_loops_own_draws_beside_the_read_ahead_are_not_taken_for_its(
    jpegs: Path,
) -> None:
    # The loop draws from every process-wide generator (CPU dropout draws from torch's)
    # while the read-ahead thread transforms the next chunks: not the transform's draws.
    torch = pytest.importorskip("torch")
    src = FileSource(jpegs, format="jpeg", labels="folders", image_mode="RGB")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with Loader(src, batch_size=4, seed=3, steps=14, transform=normalised, chunk_steps=1) as ld:
            for _ in ld:
                for _ in range(200):
                    np.random.rand(), random.random(), torch.rand(())


def _in_a_worker(root: str, out: Any) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        batches(Path(root), global_numpy, chunk_steps=2)  # read-ahead on: its thread
    out.put([str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)])


def test_a_worker_process_checks_its_read_ahead_threads_transform(jpegs: Path) -> None:
    # No training loop runs in a worker (a DataLoader's, headrace's): its read-ahead's
    # transforms are checked, where workers give other bytes than num_workers=0.
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    p = ctx.Process(target=_in_a_worker, args=(str(jpegs), out))
    p.start()
    said = out.get(timeout=120)
    p.join(30)
    assert len(said) == 1 and "global_numpy" in said[0], said
