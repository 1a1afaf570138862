"""The once battery (tests/pipeline/test_once_battery.py) through the torch adapters: a
few source kinds, each on the last of its hosts, give the bare loader's rows through
``HeadraceDataLoader`` with 0, 1 and 3 workers, a state saved with one worker count resumes
with another, a torch ``DataLoader`` with 0 and 3 workers gives them too, and an exact
pass through workers marks each sample valid once over two hosts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is an optional extra (pip install torch)")
pytest.importorskip("pyarrow")
pytest.importorskip("datasets")
pytest.importorskip("h5py")

from torch.utils.data import DataLoader  # noqa: E402

from _once_data import MIX_BATCH, SOURCES, build, mixture, row_digests  # noqa: E402
from headrace.pipeline import Loader  # noqa: E402
from headrace.torch import HeadraceDataLoader, TorchDataset  # noqa: E402

pytestmark = [
    pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning"),
    pytest.mark.filterwarnings("ignore:os.fork\\(\\) was called:RuntimeWarning"),
]

STEPS, K = 9, 4


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("once-torch")
    build(d)
    return d


def _source(root: Path, kind: str, shuffle: Any) -> Any:
    if kind == "mix_rows":
        return mixture(root, kind, shuffle)
    return SOURCES[kind][0](root, shuffle)


def _rows(batch: dict[str, Any]) -> list[str]:
    """Row digests of a torch batch (a ragged key is a list of tensors)."""
    arrays = {
        k: v.numpy() if isinstance(v, torch.Tensor) else [np.asarray(e) for e in v]
        for k, v in batch.items()
    }
    return row_digests(arrays)


@pytest.mark.parametrize(
    ("kind", "shuffle", "batch", "world", "workers"),
    [
        ("tokens", True, 6, 2, (0, 3)),
        ("tar", "samples", 6, 3, (3, 1)),
        ("mds", "window", 4, 2, (1, 0)),
        ("mix_rows", True, MIX_BATCH, 5, (3, 0)),
    ],
)
def test_workers_give_the_bare_loaders_rows_and_resume_with_another_count(
    root: Path, kind: str, shuffle: Any, batch: int, world: int, workers: tuple[int, int]
) -> None:
    rank, seed = world - 1, 8
    ragged = ("x",) if kind == "mds" else ()  # its bytes column: samples of several lengths
    with Loader(
        _source(root, kind, shuffle), batch_size=batch, seed=seed, rank=rank, world_size=world
    ) as ld:
        it = iter(ld)
        bare = [row_digests(next(it)) for _ in range(STEPS)]

    def dataset(steps: int) -> TorchDataset:
        return TorchDataset(
            _source(root, kind, shuffle),
            batch_size=batch,
            seed=seed,
            rank=rank,
            world_size=world,
            steps=steps,
            chunk_steps=2,
            ragged=ragged,
        )

    with HeadraceDataLoader(dataset(K), num_workers=workers[0]) as dl:
        first = [_rows(b) for b in dl]
        state = dl.state_dict()
    with HeadraceDataLoader(dataset(STEPS), num_workers=workers[1]) as dl:
        dl.load_state_dict(state)
        rest = [_rows(b) for b in dl]
    assert first + rest == bare
    if kind == "tokens":  # torch's own DataLoader, its workers each a stride of the steps
        for n in (0, 3):
            got = [_rows(b) for b in DataLoader(dataset(STEPS), batch_size=None, num_workers=n)]
            assert got == bare, n


def test_an_exact_pass_through_workers_marks_each_sample_once(root: Path) -> None:
    n = SOURCES["tar"][0](root, "samples").samples_per_epoch
    seen: list[int] = []
    for rank in range(2):
        ds = TorchDataset(
            _source(root, "tar", "samples"), batch_size=10, rank=rank, world_size=2, epochs=1
        )
        with HeadraceDataLoader(ds, num_workers=2) as dl:
            for b in dl:
                seen += b["sample"][b["valid"]].tolist()
    assert sorted(seen) == list(range(n))
