"""MDSSource under HeadraceDataLoader workers: each worker's copy (pickled: the index
and listing travel, its reader is its own) gives the main process's batches."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is an optional extra (pip install torch)")

from _mds_files import write_mds  # noqa: E402
from headrace import torch as ht  # noqa: E402
from headrace.formats import MDSSource  # noqa: E402
from headrace.testing import batch_digest  # noqa: E402

pytestmark = [
    pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning"),
    pytest.mark.filterwarnings("ignore:os.fork\\(\\) was called:RuntimeWarning"),
]


def test_workers_read_the_batches_of_the_main_process(tmp_path: Path) -> None:
    samples = [{"y": k, "v": np.full(3, k, np.float32), "t": "s" * (k % 4)} for k in range(40)]
    write_mds(tmp_path, {"y": "int", "v": "ndarray:float32:3", "t": "str"}, samples, per_shard=8)

    def digests(workers: int) -> list[str]:
        ds = ht.TorchDataset(MDSSource(tmp_path, columns=["y", "v"]), batch_size=4, steps=12)
        with ht.HeadraceDataLoader(ds, num_workers=workers) as dl:
            return [batch_digest([{k: t.numpy() for k, t in b.items()}]) for b in dl]

    main = digests(0)
    assert len(main) == 12
    assert digests(2) == main
