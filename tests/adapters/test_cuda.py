"""The adapters on a real GPU: pinned pages, asynchronous copies, JAX arrays on the device.

Everywhere else pinning is pretended (``fake_pin``: no GPU on the CI machine). Here
``pin_memory=True`` must give page-locked tensors, batches copied to the GPU with
``non_blocking=True`` and not synchronised until the end must arrive as the plan
says (a loader that reused a batch's pages while a copy from them was in flight
would corrupt them), and a ``JaxLoader`` must place its arrays on the GPU. The
module skips where no CUDA device is (run it on a GPU host:
``python -m pytest tests/adapters/test_cuda.py -n 0``).
"""

from __future__ import annotations

from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is an optional extra (pip install torch)")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device (torch.cuda.is_available() is False)", allow_module_level=True)

from _adapter_data import BATCH, token_source  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from headrace import torch as ht  # noqa: E402
from headrace.formats import FileSource  # noqa: E402
from headrace.pipeline import Loader  # noqa: E402
from headrace.testing import batch_digest  # noqa: E402

STEPS = 64  # more batches than any side's buffers (read-ahead, rings, pinned blocks) hold

pytestmark = pytest.mark.filterwarnings("ignore:os.fork\\(\\) was called:RuntimeWarning")


def dataset(root: Path, **kw: Any) -> ht.TorchDataset:
    return ht.TorchDataset(token_source(root), batch_size=BATCH, seed=5, steps=STEPS, **kw)


def digest(b: dict[str, Any]) -> str:
    return batch_digest([{k: v.cpu().numpy() for k, v in b.items()}])


@pytest.fixture(scope="module")
def reference(root: Path) -> list[str]:
    with Loader(token_source(root), batch_size=BATCH, seed=5, steps=STEPS) as ld:
        return [batch_digest([b]) for b in ld]


def side_of(root: Path, side: str) -> Any:
    """The batches of one way of pinning, as tensors on the host."""
    if side == "dataset":
        return dataset(root, pin_memory=True)
    if side == "stock":
        return DataLoader(dataset(root), batch_size=None, num_workers=2, pin_memory=True)
    workers = 2 if side == "workers" else 0
    return ht.HeadraceDataLoader(dataset(root), num_workers=workers, pin_memory=True)


SIDES = ["dataset", "workers", "in-process", "stock"]


@pytest.mark.parametrize("side", SIDES)
def test_pinned_batches_are_page_locked_and_equal_the_plan(
    root: Path, reference: list[str], side: str
) -> None:
    got = list(side_of(root, side))
    assert all(t.is_pinned() for b in got for t in b.values())
    if side != "stock":  # a stock DataLoader pins each field apart
        # x and y are views of one pinned copy of the batch's rows, not two copies.
        assert all(
            b["x"].untyped_storage().data_ptr() == b["y"].untyped_storage().data_ptr() for b in got
        )
    assert [digest(b) for b in got] == reference


@pytest.mark.parametrize("side", [*SIDES, "loader"])
def test_non_blocking_copies_arrive_as_planned(root: Path, reference: list[str], side: str) -> None:
    # Every batch goes to the GPU with non_blocking=True on a side stream that is
    # held back, so no copy can finish before the loader has moved far past it;
    # nothing is synchronised until all 64 have been handed over.
    stream = torch.cuda.Stream()
    gate = torch.cuda.Event()
    with torch.cuda.stream(stream):
        torch.cuda._sleep(2_000_000_000)  # about 1 s of GPU time (2 GHz) ahead of every copy
    on_gpu = []
    if side == "loader":
        ld = Loader(token_source(root), batch_size=BATCH, seed=5, steps=STEPS)
        batches: Any = ({k: torch.from_numpy(v) for k, v in b.items()} for b in ld)
    else:
        batches = side_of(root, side)
    with torch.cuda.stream(stream):
        for b in batches:
            on_gpu.append({k: v.to("cuda", non_blocking=True) for k, v in b.items()})
    if side == "loader":
        ld.close()
    gate.record(stream)
    gate.synchronize()
    assert all(t.device.type == "cuda" for b in on_gpu for t in b.values())
    assert [digest(b) for b in on_gpu] == reference


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """NPZ files of images of three sizes: ragged samples, one tensor each."""
    root = tmp_path_factory.mktemp("npz")
    rng = np.random.default_rng(4)
    for i in range(24):
        side = (8, 13, 21)[i % 3]
        np.savez(root / f"{i:02d}.npz", image=rng.integers(0, 256, (side, side, 3), np.uint8))
    return root


def test_ragged_samples_are_pinned_one_by_one(images: Path) -> None:
    def ds() -> ht.TorchDataset:
        src = FileSource(images, format="npz", datasets=["image"])
        return ht.TorchDataset(src, batch_size=4, seed=3, steps=12, ragged=["image"])

    want = [[t.numpy().tobytes() for t in b["image"]] for b in ds()]
    with ht.HeadraceDataLoader(ds(), num_workers=2, pin_memory=True) as dl:
        got = list(dl)
    assert all(t.is_pinned() for b in got for t in b["image"])
    assert [
        [t.cuda(non_blocking=True).cpu().numpy().tobytes() for t in b["image"]] for b in got
    ] == want


def test_jax_arrays_land_on_the_gpu(root: Path, reference: list[str]) -> None:
    jax = pytest.importorskip("jax", reason="jax is an optional extra")
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from headrace.jax import JaxLoader

    gpus = [d for d in jax.devices() if d.platform == "gpu"]
    if not gpus:
        pytest.skip("jax sees no GPU (a CPU-only jaxlib)")
    sharding = NamedSharding(jax.make_mesh((len(gpus),), ("data",), devices=gpus), P("data"))
    kw: dict[str, Any] = {"batch_size": BATCH, "sharding": sharding, "seed": 5, "steps": STEPS}
    with JaxLoader(token_source(root), **kw) as ld:
        first = [{k: np.asarray(v) for k, v in b.items()} for b in islice(ld, 10)]
        state = ld.state_dict()
    with JaxLoader(token_source(root), **kw) as ld:
        ld.load_state_dict(state)
        rest = []
        for b in ld:
            assert all(d.platform == "gpu" for v in b.values() for d in v.devices())
            rest.append({k: np.asarray(v) for k, v in b.items()})
    assert [batch_digest([b]) for b in first + rest] == reference
