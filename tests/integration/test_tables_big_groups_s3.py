"""A Parquet row group larger than ``window_rows`` on S3 (moto on 127.0.0.1): streamed by
ranged GETs a few pieces ahead of the decoder, with the local file's batches, and a GET
that fails mid-group (5xx, a stall, a short body) named, with nothing lost after it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from s3util import BUCKET, STALL_S, S3Fixture
from s3util import store_options as options

from headrace.emulate import FaultRule, LatencyProxy
from headrace.errors import TransientStorageError
from headrace.formats import Ragged, TableSource
from headrace.formats import _table_remote as remote
from headrace.io import RetryPolicy
from headrace.pipeline import Loader
from headrace.testing import assert_resume_exact, batch_digest

pytestmark = pytest.mark.integration

URL = f"s3://{BUCKET}/bigtables/big.parquet"
ROWS = 12_000  # one row group, 12 sub-windows
KW: dict[str, Any] = {"columns": ["tok", "label", "text"], "width": 56, "window_rows": 1_000}
PIECE, DEPTH = 8 << 10, 3


@pytest.fixture(scope="module")
def big(s3: S3Fixture, tmp_path_factory: pytest.TempPathFactory) -> Path:
    rng = np.random.default_rng(8)
    lengths = rng.integers(1, 33, ROWS)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    tok = pa.ListArray.from_arrays(
        pa.array(offsets), pa.array(rng.integers(0, 50_000, int(offsets[-1])).astype(np.int32))
    )
    table = pa.table(
        {
            "tok": tok,
            "label": np.arange(ROWS, dtype=np.int64),
            "text": [f"row {k} " + "y" * int(k % 40) for k in range(ROWS)],
        }
    )
    path = tmp_path_factory.mktemp("big-s3") / "big.parquet"
    pq.write_table(table, path, row_group_size=ROWS, data_page_size=4096, use_dictionary=False)
    s3.server.info.boto3_client().put_object(
        Bucket=BUCKET, Key="bigtables/big.parquet", Body=path.read_bytes()
    )
    return path


@pytest.fixture(autouse=True)
def small_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(remote, "AHEAD_PIECE", PIECE)
    monkeypatch.setattr(remote, "AHEAD_DEPTH", DEPTH)
    monkeypatch.setattr(remote, "STREAM_BUFFER", 16 << 10)


def test_s3_streams_a_big_group_with_the_local_batches(s3: S3Fixture, big: Path) -> None:
    steps = ROWS // 40 + 20  # into the next epoch: its stream read ahead meanwhile
    want = batch_digest(Loader(TableSource(big, **KW), batch_size=40, seed=1, steps=steps))
    src = TableSource(URL, store_options=options(s3), **KW)
    assert batch_digest(Loader(src, batch_size=40, seed=1, steps=steps)) == want
    table = src.table
    part = table._parts[0]
    assert isinstance(part, remote.RemoteParquet)
    stored = part.stored_bytes(0)
    # Two streams (this epoch's, the next one's) of 3 chunks, each a read's pieces (a
    # 16 KiB buffer: 3 pieces) and DEPTH more: 432 KiB at most, of a 1 MB group.
    assert 0 < table.peak_stream_bytes <= 2 * 3 * PIECE * (DEPTH + 3) < stored // 2
    assert table.misses == 0
    src.close()
    assert_resume_exact(
        lambda: Loader(TableSource(URL, store_options=options(s3), **KW), batch_size=64, seed=2),
        steps=60,
        resume_at=[7, 33],
    )


STALL = RetryPolicy(attempts=2, base_delay_s=0.01, max_delay_s=0.05, timeout_s=2.0)


@pytest.mark.parametrize(
    ("kind", "error"),
    [("status", "HTTP 503"), ("stall", "timed out"), ("short", r"cut short \(4096 of 8192 bytes")],
)
def test_a_failed_get_mid_group_is_named_and_loses_nothing(
    s3: S3Fixture, big: Path, proxy: LatencyProxy, kind: str, error: str
) -> None:
    local = TableSource(big, **KW).table
    opts = {**options(s3, proxy.endpoint), **({"retry": STALL} if kind == "stall" else {})}
    table = TableSource(URL, store_options=opts, **KW).table  # table rows, sub-windows
    rows = np.arange(0, 100)
    assert np.array_equal(table.read_rows(rows)["label"], rows)  # the stream runs
    proxy.set_faults([FaultRule(kind=kind, stall_s=STALL_S, match="GET /headrace-test/bigtables/")])  # type: ignore[arg-type]
    rows = np.arange(5_000, 5_100)
    with pytest.raises(TransientStorageError, match=rf"{URL}, bytes \[\d+, \d+\): ") as info:
        table.read_rows(rows)
    assert any(  # where in the table, beside the store's object and bytes
        f"{URL}: row group 0: rows [5000, 6000): streaming its bytes" in n
        for n in info.value.__notes__
    )
    assert re.search(error, str(info.value), re.IGNORECASE), str(info.value)
    assert proxy.stats.faults >= 1
    part = table._parts[0]
    assert isinstance(part, remote.RemoteParquet)
    assert part.held.now == 0  # the failed stream and its GETs dropped
    proxy.set_faults([])
    got, want = table.read_rows(rows), local.read_rows(rows)
    for c in KW["columns"]:
        a, b = got[c], want[c]
        if isinstance(a, Ragged):
            assert isinstance(b, Ragged) and np.array_equal(a.offsets, b.offsets)
            a, b = a.values, b.values
        assert np.array_equal(a, b)
    assert table.skipped_rows == 5_000  # the group read again from its first row
    table.close()
