"""HeadraceDataLoader gives the bare loader's batches, drawn at random: sources, worker
counts before and after a resume (persistent or not, a loop broken off and begun again),
chunking and hosts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from _invariant_settings import invariant_settings
from _row_files import padded_rows
from headrace.formats import PaddedRows, TokenSource
from headrace.pipeline import Loader, Mixture
from headrace.testing import batch_digest

torch = pytest.importorskip("torch")
from headrace.torch import HeadraceDataLoader, TorchDataset  # noqa: E402

BATCH = 12
STEPS = 10


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("torch-invariants")
    np.random.default_rng(0).integers(0, 50_000, 4_001, dtype=np.uint16).tofile(d / "a.bin")
    padded_rows(d, 71, 33, seed=1, prompt_mod=5, ext=".npy", empty_every=11)
    return d


def _source(root: Path, kind: str) -> Any:
    if kind == "tokens":
        return TokenSource(root / "a.bin", context=32, dtype="uint16")
    right = PaddedRows(root / "tok.npy", root / "mask.npy", context=32, shuffle="window")
    if kind == "padded":
        return right
    left = PaddedRows(root / "tok.npy", root / "mask.npy", context=32, pad_side="left")
    return Mixture({"right": right, "left": left}, [0.6, 0.4], batch_size=BATCH)


def _numpy(batch: dict[str, Any]) -> dict[str, np.ndarray]:
    return {k: v.numpy() for k, v in batch.items()}


@invariant_settings(6)
@given(
    kind=st.sampled_from(["tokens", "padded", "mixture"]),
    workers=st.tuples(st.integers(0, 3), st.integers(0, 3)),
    persistent=st.booleans(),
    chunk=st.sampled_from([1, 3, 32]),
    world=st.sampled_from([1, 2]),
    k=st.integers(1, STEPS),  # steps=0 is a run with nothing to yield, and warns so
    j=st.integers(0, STEPS),
    seed=st.integers(0, 2**40),
)
def test_workers_resume_and_passes_give_the_bare_loaders_batches(
    root: Path,
    kind: str,
    workers: tuple[int, int],
    persistent: bool,
    chunk: int,
    world: int,
    k: int,
    j: int,
    seed: int,
) -> None:
    j = min(j, k - 1)  # broken off before the end: at it, looping again warns (nothing left)
    rank = world - 1  # the last host's slice
    with Loader(
        _source(root, kind), batch_size=BATCH, seed=seed, rank=rank, world_size=world
    ) as ld:
        it = iter(ld)
        bare = [next(it) for _ in range(STEPS)]

    def loader(num_workers: int, steps: int) -> HeadraceDataLoader:
        ds = TorchDataset(
            _source(root, kind),
            batch_size=BATCH,
            seed=seed,
            rank=rank,
            world_size=world,
            steps=steps,
            chunk_steps=chunk,
        )
        return HeadraceDataLoader(
            ds, num_workers=num_workers, persistent_workers=persistent and num_workers > 0
        )

    with loader(workers[0], k) as dl:
        # A loop broken off after j steps; a new iter() goes on from the consumer's step.
        first = [_numpy(b) for _, b in zip(range(j), dl, strict=False)]
        first += [_numpy(b) for b in dl]
        state = dl.state_dict()
    with loader(workers[1], STEPS) as dl:
        dl.load_state_dict(state)
        rest = [_numpy(b) for b in dl]
    assert batch_digest(first) == batch_digest(bare[:k])
    assert batch_digest(first + rest) == batch_digest(bare)
