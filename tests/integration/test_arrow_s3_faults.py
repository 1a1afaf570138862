"""Faults under a ``datasets.save_to_disk`` folder (Arrow IPC streams) read from S3.

Parquet tables and file datasets have their fault tests; these are the Arrow
reader's, through the fault proxy in front of moto: transient faults (5xx, a
dropped connection, a body cut short, a stalled GET) are retried and the
batches are the local folder's, bit for bit; a permanent 403 on one shard is
an error naming that shard's object.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from s3util import BUCKET, STALL_RETRY, STALL_S, S3Fixture
from s3util import store_options as options

from headrace.emulate import FaultRule, LatencyProxy
from headrace.errors import PermissionDeniedError
from headrace.formats import TableSource
from headrace.pipeline import Loader
from headrace.testing import batch_digest

pytestmark = pytest.mark.integration

PREFIX = "arrowfaults/hf"
URL = f"s3://{BUCKET}/{PREFIX}"
MATCH = f"GET /{BUCKET}/{PREFIX}/data-"  # the shards' GETs, not state.json's or a listing
KW: dict[str, Any] = {"columns": ["input_ids", "label"], "width": 64, "shuffle": "window"}
STEPS = 24


@pytest.fixture(scope="module")
def saved(s3: S3Fixture, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A save_to_disk folder of 3 shards of 2,000 rows, also under ``arrowfaults/hf``."""
    datasets = pytest.importorskip("datasets")
    rng = np.random.default_rng(4)
    n = 6000
    rows = {
        "input_ids": [rng.integers(0, 50_000, k).astype(np.int32) for k in rng.integers(1, 64, n)],
        "label": np.arange(n),
    }
    root = tmp_path_factory.mktemp("arrowfaults") / "hf"
    datasets.Dataset.from_dict(rows).save_to_disk(str(root), num_shards=3)
    client = s3.server.info.boto3_client()
    for f in sorted(root.iterdir()):
        client.put_object(Bucket=BUCKET, Key=f"{PREFIX}/{f.name}", Body=f.read_bytes())
    return root


def _digest(src: TableSource) -> str:
    with Loader(src, batch_size=32, seed=3, steps=STEPS) as loader:
        return batch_digest(loader)


@pytest.mark.parametrize(
    "faults",
    [
        [
            # Three faults at most, so no GET can meet more than its 4 tries allow.
            FaultRule(kind="status", status=503, match=MATCH, every=3, limit=1),
            FaultRule(kind="status", status=500, match=MATCH, limit=1),
            FaultRule(kind="drop", match=MATCH, every=2, limit=1),
        ],
        [FaultRule(kind="truncate", match=MATCH, limit=2)],
        [FaultRule(kind="stall", stall_s=STALL_S, match=MATCH, limit=1)],
    ],
    ids=["5xx-and-drop", "cut-body", "stall"],
)
def test_transient_faults_are_retried_and_the_batches_are_the_local_ones(
    s3: S3Fixture, saved: Path, proxy: LatencyProxy, faults: list[FaultRule]
) -> None:
    want = _digest(TableSource(saved, **KW))
    proxy.set_faults(faults)
    stalls = any(f.kind == "stall" for f in faults)
    retry = {"retry": STALL_RETRY} if stalls else {}  # else FAST_RETRY: 4 tries
    src = TableSource(URL, store_options={**options(s3, proxy.endpoint), **retry}, **KW)
    try:
        assert _digest(src) == want
        assert proxy.stats.faults == sum(f.limit or 0 for f in faults)
        assert src.object_stats is not None and src.object_stats.retries >= 1
    finally:
        src.close()


def test_a_permanent_403_names_the_shard(s3: S3Fixture, saved: Path, proxy: LatencyProxy) -> None:
    shards = sorted(p.name for p in saved.glob("data-*.arrow"))
    assert len(shards) == 3
    src = TableSource(URL, store_options=options(s3, proxy.endpoint), **{**KW, "shuffle": False})
    try:
        rows = np.arange(64)  # unshuffled: rows of the first shard, read clean
        src.read(0, rows)
        proxy.set_faults([FaultRule(kind="status", status=403, match=f"{PREFIX}/{shards[2]}")])
        with pytest.raises(PermissionDeniedError, match=rf"{PREFIX}/{shards[2]}"):
            src.read(0, np.arange(4000, 4064))  # the third shard's first rows
        # The other shards still read.
        assert np.array_equal(src.read(0, rows)["label"], rows)
    finally:
        src.close()
