"""The storage ceiling of a dataset of many small files reads as many bytes as one of
large files: up to its budget, not up to a count of 4 MiB blocks."""

from __future__ import annotations

import os
from pathlib import Path

from headrace.bench._ceiling import storage_ceiling
from headrace.bench._kind import make_kind
from headrace.bench._workload import builtin_workloads
from headrace.io import io_threads


def test_a_ceiling_over_small_files_reads_its_budget_not_64_of_them(tmp_path: Path) -> None:
    # Its jobs were cut at budget // 4 MiB (64): of a dataset of 100 KB files (ImageNet's
    # JPEGs are 110 KB) it read 64 files, 6.4 MB, and called that the device's ceiling.
    files = io_threads() * 44  # 100 KB files: a 4 MiB block for every thread, and more
    wl = builtin_workloads()["npz"].replace(
        dataset={"format": "raw", "files": files, "record_bytes": 100_000},
        train={"steps": 2, "trials": 1, "warmup_steps": 1, "batch_size": 2},
    )
    kind = make_kind(wl, str(tmp_path))
    block = os.urandom(100_000)
    for path in kind.files():  # raw samples: any bytes (its generator takes seconds)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        Path(path).write_bytes(block)
    total = sum(os.path.getsize(p) for p in kind.files())
    assert total > io_threads() * (4 << 20)  # the 4 MiB blocks' path
    ceiling = storage_ceiling(kind)
    assert ceiling["bytes"] == total
    # The budget still bounds it, file by file: the first files up to 1 MiB past it.
    budget = total // 2
    ceiling = storage_ceiling(kind, budget=budget)
    assert budget <= ceiling["bytes"] < budget + (1 << 20)
