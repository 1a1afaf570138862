"""An exact evaluation pass (``epochs=1``) through the torch adapter: DataLoader workers,
HeadraceDataLoader workers, and a real 2-process gloo run whose reduced metric equals
the single-process one."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is an optional extra (pip install torch)")

from _adapter_data import token_source, torchrun, write_tokens  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from headrace.pipeline import Loader  # noqa: E402
from headrace.torch import HeadraceDataLoader, TorchDataset  # noqa: E402

HERE = Path(__file__).parent
B = 12
# Not fork: a test before this one may have started jax's threads in this process, and
# forking beside them warns (an error here). The fork server starts once for the module.
CONTEXT = "forkserver"


def metric(root: Path) -> tuple[float, int, int]:
    """Sum of per-sample losses, count, and n, from a plain single-process pass."""
    src = token_source(root, shuffle=False)
    n = src.samples_per_epoch
    y = src.read(0, np.arange(n, dtype=np.int64))["y"].astype(np.float64)
    return float(y.mean(axis=1).sum()), n, n


def valid_samples(batches: list[dict]) -> list[int]:
    return [s for b in batches for s in b["sample"][b["valid"]].tolist()]


# 1735 samples, 12 a step: the last step holds 7. On 3 ranks (4 rows each) one rank's last
# batch is whole, one's partly padding and one's all padding: every case that 2 and 4
# ranks met too (6 + 1, 3 + 3 + 1 + 0), with 4 DataLoaders of 2 workers rather than 10.
@pytest.mark.parametrize("world", [1, 3])
def test_dataloader_with_two_workers_sees_each_sample_once(tmp_path: Path, world: int) -> None:
    root = write_tokens(tmp_path)
    n = token_source(root, shuffle=False).samples_per_epoch
    seen: list[int] = []
    for rank in range(world):
        ds = TorchDataset(
            token_source(root, shuffle=False), batch_size=B, epochs=1, rank=rank, world_size=world
        )
        assert len(ds) == math.ceil(n / B)
        batches = list(
            DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context=CONTEXT)
        )
        assert len(batches) == math.ceil(n / B)
        for b in batches:
            assert b["valid"].dtype == torch.bool and len(b["valid"]) == B // world
        seen += valid_samples(batches)
        if world == 3:  # whole, part padding, all padding (see above)
            assert n % B == 7
            assert int(batches[-1]["valid"].sum()) == [4, 3, 0][rank]
    assert sorted(seen) == list(range(n))


@pytest.mark.parametrize(
    "opts", [{}, {"shuffle": False, "stride": 5}], ids=["windows", "sliding-stride-5"]
)
def test_headrace_dataloader_workers_equal_the_plain_loader(
    tmp_path: Path, opts: dict[str, object]
) -> None:
    root = write_tokens(tmp_path)
    with Loader(token_source(root, **opts), batch_size=B, epochs=1) as lo:
        want = [{k: v.copy() for k, v in b.items()} for b in lo]
    for workers in (0, 2):
        ds = TorchDataset(token_source(root, **opts), batch_size=B, epochs=1)
        with HeadraceDataLoader(ds, num_workers=workers) as dl:
            got = [{k: v.numpy().copy() for k, v in b.items()} for b in dl]
        assert len(got) == len(want)
        for a, b in zip(want, got, strict=True):
            assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


@pytest.mark.integration
def test_gloo_two_ranks_reduce_to_the_single_process_metric(tmp_path: Path) -> None:
    root = write_tokens(tmp_path)
    want_sum, want_count, n = metric(root)
    torchrun(2, "eval_gloo.py", root, tmp_path, B)
    got = json.loads((tmp_path / "eval.json").read_text())
    assert got["count"] == want_count
    assert got["sum"] == pytest.approx(want_sum, rel=1e-12)
    per_rank = got["samples"]
    assert sorted(per_rank[0] + per_rank[1]) == list(range(n))
    assert not set(per_rank[0]) & set(per_rank[1])


@pytest.mark.parametrize("workers", [0, 2])
def test_each_evaluation_over_one_dataset_is_the_whole_pass(tmp_path: Path, workers: int) -> None:
    """The PyTorch habit: one val loader, iterated at every evaluation."""
    root = write_tokens(tmp_path)
    n = token_source(root).samples_per_epoch
    ds = TorchDataset(token_source(root, shuffle=False), batch_size=B, epochs=1)
    with HeadraceDataLoader(ds, num_workers=workers) as dl:
        for _ in range(2):
            assert len(dl) == math.ceil(n / B)
            assert sorted(valid_samples([dict(b) for b in dl])) == list(range(n))
    stock = TorchDataset(token_source(root, shuffle=False), batch_size=B, epochs=1)
    for _ in range(2):
        batches = list(
            DataLoader(
                stock,
                batch_size=None,
                num_workers=workers,
                multiprocessing_context=CONTEXT if workers else None,
            )
        )
        assert sorted(valid_samples(batches)) == list(range(n))
