"""Faults under the ranged GETs of NPY and NPZ rows on S3 (moto behind the fault proxy).

Reading a file's rows by ranges (``npy_ranges_above`` / ``npz_ranges_above``) is a
path of its own: a header GET, then one GET per run of rows. Its faults: a 5xx on
some range GETs is retried and the batches are the local ones; a body cut once is
asked again; a body shorter than the range asked, every time, is refused naming the
object, never decoded; a permanent 403 names the object.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from s3util import BUCKET, FAST_RETRY, S3Fixture

from headrace.emulate import FaultRule, LatencyProxy
from headrace.errors import PermissionDeniedError, StorageError
from headrace.formats import FileSource
from headrace.pipeline import Loader
from headrace.testing import batch_digest

pytestmark = pytest.mark.integration

FILES, ROWS = 4, 32
STEPS, BATCH = 4, 6


@pytest.fixture(scope="module")
def row_files(s3: S3Fixture, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4 NPY and 4 NPZ (stored) files of 32 rows of 32 KiB, local and on S3 under ``faults/``."""
    root = tmp_path_factory.mktemp("rowfaults")
    rng = np.random.default_rng(8)
    client = s3.server.info.boto3_client()
    for fmt in ("npy", "npz"):
        (root / fmt).mkdir()
        for i in range(FILES):
            x = rng.standard_normal((ROWS, 64, 128), dtype=np.float32)
            p = root / fmt / f"{i}.{fmt}"
            if fmt == "npy":
                np.save(p, x)
            else:
                np.savez(p, x=x)
            client.put_object(Bucket=BUCKET, Key=f"faults/{fmt}/{p.name}", Body=p.read_bytes())
    return root


def _kw(fmt: str) -> dict[str, Any]:
    return {
        "format": fmt,
        "samples_per_file": ROWS,
        "shuffle": "samples",
        f"{fmt}_ranges_above": 0,
    }


def _source(s3: S3Fixture, fmt: str, endpoint: str) -> FileSource:
    options = {**s3.options(), "retry": FAST_RETRY, "endpoint": endpoint}
    src = FileSource(f"s3://{BUCKET}/faults/{fmt}", store_options=options, **_kw(fmt))
    assert src._by_rows is not None  # rows by ranges, the path under test
    return src


ROW = 64 * 128 * 4


def _sparse_rows_of_object_3(src: FileSource) -> np.ndarray:
    """Three samples of epoch 0 on object 3 not read yet, whose rows are over 64 KiB
    apart from each other and from those read (three ranged GETs of one 32 KiB row each,
    none joined to another). Three others are read clean first: the source knows the
    object's header after that, and the rows came by ranges, not whole objects."""
    samples = np.arange(FILES * ROWS)
    files, items = src.plan.locate(0, samples)
    on3 = samples[files == 3][np.argsort(items[files == 3])]
    before = src.files.store.stats.bytes
    src.read(0, on3[[1, 5, 20]])
    assert src.files.store.stats.bytes - before < 3 * ROW + (64 << 10)  # rows + a header
    return on3[[10, 15, 27]]


def _digest(src: FileSource) -> str:
    with Loader(src, batch_size=BATCH, seed=5, steps=STEPS) as loader:
        return batch_digest(loader)


@pytest.mark.parametrize("fmt", ["npy", "npz"])
def test_5xx_and_a_cut_body_are_retried_and_the_batches_are_the_local_ones(
    s3: S3Fixture, proxy: LatencyProxy, row_files: Path, fmt: str
) -> None:
    local = _digest(FileSource(row_files / fmt, **_kw(fmt)))
    proxy.set_faults(
        [
            # Three faults at most, so no GET can meet more than its 4 tries allow.
            FaultRule(
                kind="status", status=503, match=f"GET /{BUCKET}/faults/{fmt}/", every=3, limit=1
            ),
            FaultRule(kind="status", status=500, match=f"GET /{BUCKET}/faults/{fmt}/1", limit=1),
            FaultRule(kind="truncate", match=f"GET /{BUCKET}/faults/{fmt}/2", limit=1),
        ]
    )
    src = _source(s3, fmt, proxy.endpoint)
    try:
        assert _digest(src) == local
        assert proxy.stats.faults == 3
        assert src.files.store.stats.retries >= 3
    finally:
        src.close()


@pytest.mark.parametrize(
    ("kind", "error", "said"),
    [
        # Half the bytes asked, with a Content-Length that matches them: a row's own GET
        # (32 KiB) found short, every try.
        ("short", StorageError, f"cut short ({ROW // 2} of {ROW} bytes"),
        ("403", PermissionDeniedError, "access denied"),
    ],
)
@pytest.mark.parametrize("fmt", ["npy", "npz"])
def test_a_permanent_fault_on_a_row_get_is_refused_naming_the_object(
    s3: S3Fixture,
    proxy: LatencyProxy,
    row_files: Path,
    fmt: str,
    kind: str,
    error: type[Exception],
    said: str,
) -> None:
    src = _source(s3, fmt, proxy.endpoint)
    try:
        sparse = _sparse_rows_of_object_3(src)
        match = f"GET /{BUCKET}/faults/{fmt}/3"
        rule = FaultRule(kind="short", match=match)
        if kind == "403":
            rule = FaultRule(kind="status", status=403, match=match)
        proxy.set_faults([rule])
        with pytest.raises(error, match=rf"faults/{fmt}/3\.{fmt}, bytes \[") as ei:
            src.read(0, sparse)
        assert said in str(ei.value), str(ei.value)
    finally:
        src.close()
