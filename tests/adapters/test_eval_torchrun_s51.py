"""An exact evaluation (``epochs=1``) through the torch adapter, as a user runs it during
training: per-sample losses of a tiny fixed model over token windows, padded rows with
``ignore_index``, a Parquet table and NPY files (none a multiple of batch x ranks), summed
over the valid rows and counted, ``all_reduce``d over 1, 2 and 3 gloo ranks, against the
NumPy metric of every sample read straight from the files
(``tests/pipeline/test_eval_s51.py`` holds the model and the reference).

Also an evaluation broken off (Lightning's 2-batch sanity check, ``limit_val_batches``):
the next one over the same loader is the whole pass, with 0 and 2 workers, through
``HeadraceDataLoader`` and a stock ``DataLoader``; it went on from the broken step.

Run as a script on torchrun's ranks: ``test_eval_torchrun_s51.py ROOT OUT`` (rank 0
writes OUT/eval{world}.json); the test starts them without torchrun's agent
(``_adapter_data.ranks``: its process imports torch too, 2.1 s CPU a launch).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="torch is an optional extra (pip install torch)")

import torch.distributed as dist  # noqa: E402
from _adapter_data import ranks  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from headrace.torch import HeadraceDataLoader, TorchDataset  # noqa: E402

HERE = Path(__file__).parent
B = 12
KINDS = ("tokens", "rows", "table", "npy")


def _journey() -> ModuleType:
    """The pipeline test's data, model and NumPy reference (one definition of each)."""
    path = HERE.parent / "pipeline" / "test_eval_s51.py"
    spec = importlib.util.spec_from_file_location("_eval_s51", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


J = _journey()


def loader(root: Path, kind: str, kind_of: str, workers: int) -> Any:
    ds = TorchDataset(J.sources(root)[kind](), batch_size=B, epochs=1)
    if kind_of == "headrace":
        return HeadraceDataLoader(ds, num_workers=workers)
    context = "forkserver" if workers else None
    return DataLoader(ds, batch_size=None, num_workers=workers, multiprocessing_context=context)


def evaluate(batches: Any, kind: str, stop: int | None = None) -> tuple[Any, list[int]]:
    """Sum and count over the valid rows as float64 tensors, and the samples they were."""
    sums = torch.zeros(2, dtype=torch.float64)
    seen: list[int] = []
    # zip takes no batch past ``stop``: a state saved then resumes at the first not seen.
    for _, b in zip(range(stop) if stop is not None else iter(int, 1), batches, strict=False):
        arrays = {k: v.numpy() for k, v in b.items()}
        loss, count = J.losses(kind, arrays)
        ok = arrays["valid"]
        sums += torch.tensor([loss[ok].sum(), count[ok].sum()], dtype=torch.float64)
        seen += arrays["sample"][ok].tolist()
    return sums, seen


def configurations(world: int) -> tuple[list[tuple[str, int]], int]:
    """The (loader, workers) each rank evaluates with, and the workers of the resumed
    pass: every one on 2 ranks; on 1 and 3, without workers (worker pools, started by
    every rank for every source, took most of the test's 90 s; how ranks split the pass
    is the workers' concern on 2 ranks, and the reduction's on 1, 2 and 3)."""
    if world == 2:
        return [(k, w) for k in ("headrace", "stock") for w in (0, 2)], 2
    return [("headrace", 0), ("stock", 0)], 0


def main(root: Path, out: Path) -> None:
    """Every rank: each source, stock and headrace loaders (with 0 and 2 workers on 2
    ranks): a sanity check of 2 batches, then the evaluation; and a pass resumed from a
    mid-pass state."""
    dist.init_process_group("gloo")
    world = dist.get_world_size()
    configs, resume_workers = configurations(world)
    results: dict[str, Any] = {}
    for kind in KINDS:
        for kind_of, workers in configs:
            dl = loader(root, kind, kind_of, workers)
            evaluate(dl, kind, stop=2)  # the sanity check
            sums, seen = evaluate(dl, kind)
            if kind_of == "headrace":
                dl.close()
            dist.all_reduce(sums)
            gathered: list[Any] = [None] * world
            dist.all_gather_object(gathered, seen)
            results[f"{kind}/{kind_of}/{workers}"] = [sums.tolist(), gathered]
        # Preempted mid-pass: the state at step 2 resumes the pass in a new loader. Saved
        # while the iteration lives (once a loop has left it, the state names step 0, where
        # the next iteration starts).
        dl = loader(root, kind, "headrace", resume_workers)
        it = iter(dl)
        sums, seen = evaluate(it, kind, stop=2)
        state = dl.state_dict()
        del it
        dl.close()
        dl = loader(root, kind, "headrace", resume_workers)
        dl.load_state_dict(state)
        more, rest = evaluate(dl, kind)
        dl.close()
        sums += more
        dist.all_reduce(sums)
        gathered = [None] * world
        dist.all_gather_object(gathered, seen + rest)
        results[f"{kind}/resumed/{resume_workers}"] = [sums.tolist(), gathered]
    if dist.get_rank() == 0:
        out.joinpath(f"eval{world}.json").write_text(json.dumps(results))
    dist.destroy_process_group()


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("kind_of", ["headrace", "stock"])
def test_an_evaluation_after_a_sanity_check_is_the_whole_pass(
    tmp_path: Path, kind_of: str, workers: int
) -> None:
    J.write(tmp_path)
    n = J.reference(tmp_path, "rows")[2]
    dl = loader(tmp_path, "rows", kind_of, workers)
    evaluate(dl, "rows", stop=2)
    assert len(dl) == -(-n // B)
    assert sorted(evaluate(dl, "rows")[1]) == list(range(n))  # 77 of 101 before
    assert sorted(evaluate(dl, "rows")[1]) == list(range(n))
    if kind_of == "headrace":
        dl.close()


@pytest.mark.integration
def test_gloo_on_1_2_3_ranks_reduces_to_the_numpy_metric(tmp_path: Path) -> None:
    J.write(tmp_path)
    want = {kind: J.reference(tmp_path, kind) for kind in KINDS}
    for world in (1, 2, 3):
        ranks(world, Path(__file__).name, tmp_path, tmp_path)
        got = json.loads((tmp_path / f"eval{world}.json").read_text())
        assert len(got) == len(KINDS) * (len(configurations(world)[0]) + 1)
        for key, ((total, count), per_rank) in got.items():
            want_sum, want_count, n = want[key.split("/")[0]]
            assert sorted(s for rank in per_rank for s in rank) == list(range(n)), (world, key)
            assert count == want_count, (world, key)
            assert total == pytest.approx(want_sum, rel=1e-12), (world, key)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
