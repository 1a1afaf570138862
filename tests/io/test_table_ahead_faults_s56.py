"""A table on S3 (moto on 127.0.0.1, behind headrace's fault proxy) read in sub-windows,
whose store stops answering while the next sub-window's bytes are read ahead: a Parquet
row group larger than ``window_rows`` (streamed, :mod:`headrace.formats._table_ahead`)
and an Arrow record batch larger than it (:mod:`headrace.formats._arrow_slice`). The
batch that waits on the read-ahead gives up with the read-ahead's error, after its tries,
not after the whole retry policy once more. Faults are injected by the proxy only; the
batches delivered before are compared with pyarrow's reading of the same rows."""

from __future__ import annotations

import io
import logging
import re
from collections import Counter
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from _tries import gave_up_tried_once
from headrace.errors import TransientStorageError
from headrace.formats import TableSource
from headrace.io import RetryPolicy
from headrace.pipeline import Loader

BUCKET = "ahead-s56"
ROWS, GROUP = 800, 200  # 4 row groups (record batches) of 200 rows; sub-windows of 50


@pytest.fixture(scope="module")
def s3() -> Iterator[Any]:
    pytest.importorskip("moto")
    from headrace.emulate import LatencyProxy, LocalS3

    rng = np.random.default_rng(56)
    table = pa.table({"id": np.arange(ROWS), "x": rng.standard_normal(ROWS)})
    parquet, arrow = io.BytesIO(), io.BytesIO()
    pq.write_table(table, parquet, row_group_size=GROUP)
    with pa.ipc.new_file(arrow, table.schema) as writer:  # uncompressed: cut by ranges
        writer.write_table(table, max_chunksize=GROUP)
    with LocalS3() as server, LatencyProxy(server.info.endpoint) as proxy:
        server.create_bucket(BUCKET)
        client = server.info.boto3_client()
        client.put_object(Bucket=BUCKET, Key="pq/part-0.parquet", Body=parquet.getvalue())
        client.put_object(Bucket=BUCKET, Key="arrow/part-0.arrow", Body=arrow.getvalue())
        yield server, proxy, table


@pytest.mark.parametrize(("folder", "name"), [("pq", "part-0.parquet"), ("arrow", "part-0.arrow")])
def test_a_sub_window_read_ahead_the_batch_waited_on_is_not_fetched_again(
    s3: Any, caplog: pytest.LogCaptureFixture, folder: str, name: str
) -> None:
    # The store answers 500 to every GET from the third batch on; the batch that needs
    # the next sub-window waits on its read-ahead. Until 2026-12-07, when that gave up,
    # the batch fetched the same ranges once more with the whole retry policy (a stalled
    # store: twice the policy's time to fail), every try said twice.
    from headrace.emulate._proxy_faults import FaultRule

    server, proxy, table = s3
    proxy.set_faults([])
    # Waits long (1 s) against a batch's decode (ms): the read-ahead is in flight when
    # the batch that needs it asks.
    retry = RetryPolicy(attempts=3, base_delay_s=1.0, max_delay_s=1.0, timeout_s=5.0)
    options = {**server.info.store_options(), "endpoint": proxy.endpoint, "retry": retry}
    src = TableSource(
        f"s3://{BUCKET}/{folder}", window_rows=50, shuffle="window", store_options=options
    )
    want = table.column("x").to_numpy()
    got: list[np.ndarray] = []
    try:
        with (
            caplog.at_level(logging.WARNING, logger="headrace"),
            pytest.raises(TransientStorageError) as info,
            Loader(src, batch_size=10, seed=0, steps=80, prefetch=1) as loader,
        ):
            for batch in loader:
                ids = np.asarray(batch["id"])
                assert np.array_equal(np.asarray(batch["x"]), want[ids])
                got.append(ids)
                if len(got) == 2:
                    proxy.set_faults([FaultRule(kind="status", status=500, match="GET")])
    finally:
        proxy.set_faults([])
        src.close()
    assert len(got) >= 2
    gave_up_tried_once(str(info.value), rf"s3://{BUCKET}/{folder}/{re.escape(name)}", caplog)
    # Nor another range of the read: pyarrow reads the next column chunk after a read
    # raised, whose read-ahead may have failed by then.
    ranges = Counter(
        r.getMessage().partition(": HTTP 500")[0]
        for r in caplog.records
        if "try 1 of 3" in r.getMessage()
    )
    assert max(ranges.values()) == 1, ranges
