"""MDSSource's read-ahead of zstd shards on S3 (moto on 127.0.0.1, behind the fault
proxy where faults are asked): the local batches, a failed GET of the next window
left to the read that needs it, and close() during a stalled read-ahead GET."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from s3util import BUCKET, FAST_RETRY, STALL_RETRY, STALL_S, S3Fixture, until_a_fault

from _mds_ahead import asked
from _mds_files import write_mds
from headrace.emulate import FaultRule, LatencyProxy
from headrace.errors import StorageError
from headrace.formats import MDSSource
from headrace.pipeline import Loader
from headrace.testing import batch_digest

pytestmark = pytest.mark.integration

COLUMNS = {"id": "int", "x": "ndarray:float32:16"}
N, PER_SHARD, WINDOW, B = 96, 8, 24, 8  # 12 shards, 4 windows of 3


@pytest.fixture(scope="module")
def roots(s3: S3Fixture, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The dataset uncompressed (local) and zstd-compressed (under ``mds/ahead`` on S3)."""
    tmp = tmp_path_factory.mktemp("mdsahead")
    rng = np.random.default_rng(2)
    samples = [{"id": k, "x": rng.standard_normal(16).astype(np.float32)} for k in range(N)]
    write_mds(tmp / "plain", COLUMNS, samples, per_shard=PER_SHARD)
    write_mds(tmp / "z", COLUMNS, samples, per_shard=PER_SHARD, compression="zstd")
    client = s3.server.info.boto3_client()
    for p in sorted((tmp / "z").iterdir()):
        client.put_object(Bucket=BUCKET, Key=f"mds/ahead/{p.name}", Body=p.read_bytes())
    return tmp / "plain", f"s3://{BUCKET}/mds/ahead"


def _remote(s3: S3Fixture, url: str, endpoint: str | None = None, **kw: Any) -> MDSSource:
    options: dict[str, Any] = {**s3.options(), "retry": kw.pop("retry", FAST_RETRY)}
    if endpoint is not None:
        options["endpoint"] = endpoint
    return MDSSource(url, store_options=options, window_rows=WINDOW, **kw)


def test_s3_batches_read_ahead_are_the_local_ones(s3: S3Fixture, roots: tuple[Path, str]) -> None:
    plain, url = roots
    local = MDSSource(plain, shuffle="window", window_rows=WINDOW)
    with Loader(local, batch_size=B, seed=1, steps=20, chunk_steps=1) as ld:
        want = batch_digest(ld)
    src = _remote(s3, url)
    wants = asked(src)
    with Loader(src, batch_size=B, seed=1, steps=20, chunk_steps=1) as ld:
        assert batch_digest(ld) == want
    # Asked for windows to come (loaded by it or first by a read: a matter of timing).
    assert len({s for w in wants for s in w}) > len(wants[0])
    assert src.stats.ahead_failed == 0


def _next_window_key(src: MDSSource) -> tuple[list[int], str]:
    """The shards of the window after the first step's, and the key of its first."""
    windows = src.windows
    assert windows is not None
    shards = list(windows.groups(windows.next_window(0, B - 1)))
    return shards, f"mds/ahead/shard.{shards[0]:05d}.mds.zstd"


def test_a_5xx_on_the_next_windows_get_fails_its_read_not_the_read_ahead(
    s3: S3Fixture, proxy: LatencyProxy, roots: tuple[Path, str]
) -> None:
    plain, url = roots
    with _remote(s3, url, proxy.endpoint) as src:
        src.read(0, np.arange(B))
        shards, key = _next_window_key(src)
        proxy.set_faults([FaultRule(kind="status", status=503, match=f"GET /{BUCKET}/{key}")])
        src.prefetch(0, np.arange(B, 2 * B))
        src._ahead.wait()  # no error here
        assert src.stats.ahead_failed >= 1 and not set(shards) & set(src.cache.held())
        tries = proxy.stats.faults
        samples = np.arange(WINDOW, 2 * WINDOW)  # the next window's
        with pytest.raises(StorageError, match=rf"{key}"):
            src.read(0, samples)
        assert proxy.stats.faults > tries  # the read's own GETs, failed in turn
        proxy.set_faults([])
        got = src.read(0, samples)  # and read once the storage answers
    with MDSSource(plain, shuffle="window", window_rows=WINDOW) as local:
        want = local.read(0, samples)
    assert np.array_equal(got["x"], want["x"]) and np.array_equal(got["id"], want["id"])


def test_close_during_a_stalled_read_ahead_get_returns_promptly(
    s3: S3Fixture, proxy: LatencyProxy, roots: tuple[Path, str]
) -> None:
    _, url = roots
    src = _remote(s3, url, proxy.endpoint, retry=STALL_RETRY)
    src.read(0, np.arange(B))
    _, key = _next_window_key(src)
    proxy.set_faults([FaultRule(kind="stall", stall_s=STALL_S, match=f"GET /{BUCKET}/{key}")])
    src.prefetch(0, np.arange(B, 2 * B))
    until_a_fault(proxy)  # the read-ahead's GET stalled
    t0 = time.monotonic()
    src.close()
    took = time.monotonic() - t0
    proxy.set_faults([])
    assert not [t for t in threading.enumerate() if t.name.startswith("headrace-mds-ahead")]
    # Its GETs cancelled by the closed queue: well under one stalled try (2 s), and
    # nowhere near the stall (30 s).
    assert took < STALL_S / 3, took
