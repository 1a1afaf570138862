"""Filtered(source, keep): refused samples replaced in place by stand-ins of their epoch,
the same whatever reads them (hosts, chunks, read-ahead, workers, a resume), on real
token, NPY and PNG files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray

from headrace.errors import ConfigError, DataError
from headrace.formats import FileSource, TokenSource, synthetic_arrays
from headrace.formats import write_sample_file as write
from headrace.pipeline import Filtered, Loader, Mixture, Samples, check
from headrace.pipeline._filtered import _stand_ins
from headrace.testing import assert_resume_exact, batch_digest

Arrays = dict[str, NDArray[Any]]


def even_start(arrays: Arrays, samples: Samples) -> NDArray[np.bool_]:
    """Keep token windows whose first token is even (about half of them)."""
    return np.asarray(arrays["x"][:, 0] % 2 == 0)


def not_third_file(arrays: Arrays, samples: Samples) -> NDArray[np.bool_]:
    """Keep samples of files whose value is not a multiple of 3."""
    return np.asarray(arrays["data"][:, 0] % 3 != 0)


def short_images(arrays: Arrays, samples: Samples) -> NDArray[np.bool_]:
    """Keep images at most 20 pixels high (a ragged batch: one shape a row)."""
    shapes = arrays.get("image_shape")
    heights = shapes[:, 0] if shapes is not None else np.full(len(arrays["image"]), 0)
    if shapes is None:
        heights[:] = arrays["image"].shape[1]
    return np.asarray(heights <= 20)


@pytest.fixture(scope="module")
def tokens(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("filtered") / "train.bin"
    np.random.default_rng(0).integers(0, 1000, 60_000, dtype=np.uint16).tofile(path)
    return path


def token_loader(path: Path, **kw: Any) -> Loader:
    src = Filtered(TokenSource(str(path), context=32), even_start)
    return Loader(src, batch_size=8, seed=3, **kw)


def test_every_row_is_kept_and_the_same_however_it_is_read(tokens: Path) -> None:
    with token_loader(tokens, steps=40) as ld:
        batches = [{k: v.copy() for k, v in b.items()} for b in ld]
        # Every refused row is replaced once; stand-ins refused in turn count as refused.
        assert 0 < ld.source.replaced < ld.source.refused
    assert all((b["x"][:, 0] % 2 == 0).all() for b in batches)
    # The unfiltered source's rows where keep said yes are these batches' rows there.
    with Loader(TokenSource(str(tokens), context=32), batch_size=8, seed=3, steps=40) as ld:
        plain = [b["x"].copy() for b in ld]
    same = sum(int((a["x"] == p).all(axis=1).sum()) for a, p in zip(batches, plain, strict=True))
    assert 100 < same < 320  # about half kept as they were, the rest stand-ins
    want = batch_digest(iter(batches))
    for kw in ({"prefetch": 0}, {"chunk_steps": 1}, {"chunk_steps": 7, "prefetch": 2}):
        with token_loader(tokens, steps=40, **kw) as ld:
            assert batch_digest(ld) == want, kw
    halves = []
    for rank in range(2):
        with token_loader(tokens, steps=40, rank=rank, world_size=2) as ld:
            halves.append([{k: v.copy() for k, v in b.items()} for b in ld])
    merged = [{k: np.concatenate([a[k], b[k]]) for k in a} for a, b in zip(*halves, strict=True)]
    assert batch_digest(iter(merged)) == want
    assert_resume_exact(lambda: token_loader(tokens), steps=30, resume_at=[0, 1, 13, 29])


def test_stand_ins_are_of_the_same_epoch_and_depend_on_the_sample_and_try() -> None:
    samples = np.array([0, 5, 999, 1000, 1001, 10**12 + 7], dtype=np.int64)
    a = _stand_ins(4, samples, 1, 1000)
    assert (a // 1000 == samples // 1000).all()
    assert (a == _stand_ins(4, samples, 1, 1000)).all()
    assert (a != _stand_ins(4, samples, 2, 1000)).any()
    assert (a != _stand_ins(5, samples, 1, 1000)).any()
    # One sample's stand-in does not depend on the others read with it.
    assert _stand_ins(4, samples[2:3], 1, 1000)[0] == a[2]


def test_files_refused_by_content_and_their_stand_ins_indexed(tmp_path: Path) -> None:
    for i in range(12):
        write("npy", tmp_path / f"{i:02d}.npy", {"data": np.full((2, 3), i, np.int32)})
    src = Filtered(FileSource(tmp_path, format="npy", samples_per_file=2), not_third_file)
    seen: list[int] = []
    with Loader(src, batch_size=6, seed=1, steps=12) as ld:  # 3 epochs of 24 samples
        for b in ld:
            assert (b["data"][:, 0] % 3 != 0).all()
            # index says which sample a row holds: the stand-in's, not the refused one's
            files = b["index"] // 2
            assert (files == b["data"][:, 0]).all()
            seen += files.tolist()
    assert set(seen) == {1, 2, 4, 5, 7, 8, 10, 11}
    assert src.refused >= 24 and src.replaced >= 24  # 4 of 12 files, 3 epochs


def test_images_of_several_sizes_merge_as_one_batch(tmp_path: Path) -> None:
    heights = [12, 30, 16, 20, 40, 14, 18, 26]
    for i, h in enumerate(heights):
        write("png", tmp_path / f"{i}.png", synthetic_arrays("png", seed=i, shape=(h, 10, 3)))
    src = Filtered(FileSource(tmp_path, format="png"), short_images)
    with Loader(src, batch_size=4, seed=0, steps=6, chunk_steps=3) as ld:
        for b in ld:
            if "image_shape" in b:
                assert (b["image_shape"][:, 0] <= 20).all()
            else:  # a step whose images agree is stacked, as FileSource's own
                assert b["image"].shape[1] <= 20
    assert src.refused > 0


def test_a_mixture_of_filtered_sources_and_workers(tokens: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.bin"
    np.arange(30_000, dtype=np.uint16).tofile(other)

    def make(**kw: Any) -> Loader:
        mix = Mixture(
            {
                "a": Filtered(TokenSource(str(tokens), context=32), even_start),
                "b": Filtered(TokenSource(str(other), context=32, dtype="uint16"), even_start),
            },
            [0.5, 0.5],
            batch_size=8,
        )
        return Loader(mix, batch_size=8, seed=2, **kw)

    with make(steps=20) as ld:
        batches = [{k: v.copy() for k, v in b.items()} for b in ld]
    assert all((b["x"][:, 0] % 2 == 0).all() for b in batches)
    assert_resume_exact(make, steps=20, resume_at=[3, 11])
    torch = pytest.importorskip("torch")
    from headrace.torch import HeadraceDataLoader, TorchDataset

    ds = TorchDataset(
        Filtered(TokenSource(str(tokens), context=32), even_start), batch_size=8, seed=3, steps=12
    )
    with HeadraceDataLoader(ds, num_workers=2) as dl:  # keep pickled into each worker
        got = [{k: v.numpy() for k, v in b.items() if torch.is_tensor(v)} for b in dl]
    with token_loader(tokens, steps=12) as ld:
        assert batch_digest(iter(got)) == batch_digest(ld)


def test_bad_keeps_and_sources_are_refused(tokens: Path) -> None:
    src = TokenSource(str(tokens), context=32)
    with pytest.raises(ConfigError, match="keep must be callable"):
        Filtered(src, "x")  # type: ignore[arg-type]
    for tries in (0, -1, True, 2.0):
        with pytest.raises(ConfigError, match="max_tries must be an integer >= 1"):
            Filtered(src, even_start, max_tries=tries)  # type: ignore[arg-type]
    mix = Mixture({"a": src}, [1.0], batch_size=8)
    with pytest.raises(ConfigError, match=r"Mixture\(\{name: Filtered\(src, keep\)"):
        Filtered(mix, even_start)
    with pytest.raises(ConfigError, match="must have read"):
        Filtered(object(), even_start)  # type: ignore[arg-type]

    class Unsized:  # a source of its own, with no epoch to draw stand-ins from
        def read(self, seed: int, samples: NDArray[np.int64]) -> Arrays:
            return {"x": samples[:, None]}

        def fingerprint(self) -> dict[str, Any]:
            return {}

    with pytest.raises(ConfigError, match="Unsized says no samples_per_epoch"):
        Filtered(Unsized(), even_start)
    one_row = Filtered(src, lambda arrays, samples: np.array([True]))
    with (
        Loader(one_row, batch_size=8, seed=0, steps=1) as ld,
        pytest.raises(
            ConfigError, match=r"keep must return one bool a row \(8 here\).*shape \(1,\)"
        ),
    ):
        next(iter(ld))
    ints = Filtered(src, lambda arrays, samples: np.ones(len(samples), np.int64))
    with (
        Loader(ints, batch_size=8, seed=0, steps=1) as ld,
        pytest.raises(ConfigError, match="dtype int64"),
    ):
        next(iter(ld))


def test_a_source_refused_whole_names_the_samples(tokens: Path) -> None:
    nothing = Filtered(
        TokenSource(str(tokens), context=32),
        lambda arrays, samples: np.zeros(len(samples), bool),
        max_tries=3,
    )
    with (
        Loader(nothing, batch_size=8, seed=0, steps=1) as ld,
        pytest.raises(
            DataError,
            match=r"keep refused sample\(s\) 0, 1, 2, 3, 4 \.\.\. \(8 of this read\) and "
            r"each of their 3 stand-ins",
        ),
    ):
        next(iter(ld))
    assert nothing.refused == 32  # 8 rows and 3 rounds of stand-ins


def test_an_exact_pass_refuses_a_filtered_source(tokens: Path) -> None:
    src = Filtered(TokenSource(str(tokens), context=32, shuffle=False), even_start)
    with pytest.raises(ConfigError, match=r"epochs=1: Filtered.*an exact pass would count twice"):
        Loader(src, batch_size=8, epochs=1)
    with pytest.raises(ConfigError, match=r"check: Filtered"):  # it would not see what went
        check(src)
