"""A store that says "slow down": moto behind a proxy that answers 503 SlowDown past N requests.

Without adapting, every read keeps its 32 or 64 tries in flight and the
retries meet the same limit until one read has used all its attempts. With
the default ``RetryPolicy(adapt_in_flight=True)`` the store halves its tries
in flight on a throttle and every read arrives, byte for byte.
"""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from s3util import BUCKET, FAST_RETRY, SMALL, S3Fixture, StoreFactory, expected

from _scripts import run_benchmark
from headrace.emulate import FaultRule, LatencyProxy
from headrace.errors import TransientStorageError
from headrace.formats import TokenSource
from headrace.io import ObjectStore, RetryPolicy
from headrace.pipeline import Loader
from headrace.testing import batch_digest

pytestmark = pytest.mark.integration

LIMIT = 4  # requests the endpoint serves at once


@pytest.fixture
def busy(s3: S3Fixture) -> Iterator[LatencyProxy]:
    with LatencyProxy(s3.server.endpoint, latency_ms=20, max_concurrent=LIMIT) as proxy:
        yield proxy


def _requests() -> list[str]:
    return SMALL * 3  # 144 GETs


def test_the_store_adapts_and_every_read_arrives(open_store: StoreFactory, busy: LatencyProxy):
    store = open_store(busy.endpoint)
    got = store.get_many(_requests(), max_in_flight=32)
    assert [bytes(v) for v in got] == [expected(k) for k in _requests()]
    s = store.stats
    assert s.throttled > 0 and s.throttled == busy.stats.throttled
    assert s.lowest_in_flight_limit is not None and s.lowest_in_flight_limit <= LIMIT
    assert s.attempts == s.requests + s.retries  # every 503 was retried; none failed
    assert busy.stats.max_in_flight <= LIMIT


def test_throttles_do_not_use_up_attempts(s3: S3Fixture) -> None:
    # One request at a time, 32 asked for, 2 attempts each: it takes the limit five
    # cuts (32 -> 16 -> ... -> 1) to settle, and then it probes past 1 every other
    # try; a throttle is flow control, not a failure, so no read gives up.
    with LatencyProxy(s3.server.endpoint, latency_ms=5, max_concurrent=1) as proxy:
        retry = replace(FAST_RETRY, attempts=2)
        store = ObjectStore(s3.url, **{**s3.options(), "endpoint": proxy.endpoint, "retry": retry})
        with store:
            got = store.get_many(SMALL, max_in_flight=32)
            assert [bytes(v) for v in got] == [expected(k) for k in SMALL]
            assert store.stats.throttled > 0 and store.stats.lowest_in_flight_limit == 1.0


def test_without_adapting_the_same_reads_give_up(open_store: StoreFactory, busy: LatencyProxy):
    store = open_store(busy.endpoint, retry=replace(FAST_RETRY, adapt_in_flight=False))
    with pytest.raises(TransientStorageError, match=r"HTTP 503 .*gave up after 4 attempts"):
        store.get_many(_requests(), max_in_flight=32)
    s = store.stats
    assert s.throttled > 0 and s.in_flight_limit is None


def test_a_longer_throttling_names_the_policy_that_waits_it_out(s3: S3Fixture) -> None:
    # A bucket that says SlowDown to every GET for a while (a storm of minutes, here 30
    # answers): a request gives up after 4 x attempts throttles. Until 2026-12-03 the
    # error said only "gave up after 4 attempts, 16 throttled tries", not how to wait
    # longer; the policy it names reads through the same storm.
    storm = [FaultRule(status=503, match="GET ", limit=30)]
    with LatencyProxy(s3.server.endpoint, faults=storm) as proxy:
        opts = {**s3.options(), "endpoint": proxy.endpoint}
        with ObjectStore(s3.url, **opts, retry=FAST_RETRY) as store:
            with pytest.raises(TransientStorageError) as info:
                store.get(SMALL[0])
        msg = str(info.value)
        assert "gave up after 4 attempts, 16 throttled tries" in msg
        assert 'store_options={"retry": RetryPolicy(attempts=8, max_delay_s=0.1)}' in msg, msg
        proxy.set_faults(storm)
        patient = RetryPolicy(attempts=8, base_delay_s=0.01, max_delay_s=0.1)
        with ObjectStore(s3.url, **opts, retry=patient) as store:
            assert bytes(store.get(SMALL[0])) == expected(SMALL[0])
            assert store.stats.throttled == 30


def test_token_batches_through_a_throttling_store_equal_the_local_file(
    s3: S3Fixture, busy: LatencyProxy, tmp_path: Path
):
    # Block reads run on the source's request queue (64 in flight): the same limit
    # governs them, and the batches are the local file's.
    path = tmp_path / "tok.bin"
    np.random.default_rng(4).integers(0, 60_000, 40_001).astype(np.uint32).tofile(path)
    s3.server.info.boto3_client().put_object(
        Bucket=BUCKET, Key="throttle/tok.bin", Body=path.read_bytes()
    )
    kw = {"context": 64, "window_bytes": 64 << 10, "block_bytes": 4 << 10, "dtype": "uint32"}
    opts = {**s3.options(), "retry": FAST_RETRY, "endpoint": busy.endpoint}
    remote = TokenSource(f"s3://{BUCKET}/throttle/tok.bin", store_options=opts, **kw)
    with Loader(remote, batch_size=32, seed=3, steps=20) as loader:
        got = batch_digest(loader)
    stats = remote.object_stats
    assert stats is not None and stats.throttled > 0
    assert stats.lowest_in_flight_limit is not None  # the limit was cut
    with Loader(TokenSource(path, **kw), batch_size=32, seed=3, steps=20) as loader:
        assert got == batch_digest(loader)


def test_the_proxy_answers_slowdown_past_its_limit(s3: S3Fixture) -> None:
    # Five requests at once, two served: three 503 SlowDown answers in S3's form. "At
    # once": all five connected before any is sent, so on a loaded machine no thread's
    # start or connect lands its request after the 300 ms a served one holds its slot.
    connected = threading.Barrier(5, timeout=30)

    def get(port: int) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            conn.connect()
            connected.wait()
            conn.request("GET", f"/{BUCKET}/data/{SMALL[0]}")
            r = conn.getresponse()
            return r.status, r.read()
        finally:
            conn.close()

    with LatencyProxy(s3.server.endpoint, latency_ms=300, max_concurrent=2) as proxy:
        with ThreadPoolExecutor(5) as pool:
            answers = list(pool.map(get, [proxy.port] * 5))
        stats = proxy.stats
    slow = [body for status, body in answers if status == 503]
    assert len(slow) == 3 and all(b"<Code>SlowDown</Code>" in b for b in slow)
    assert (stats.requests, stats.throttled, stats.max_in_flight) == (5, 3, 2)


def test_the_benchmark_runs_small_and_checks_its_digests(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    args = ["--latency-ms", "5", "--max-concurrent", "4", "--requests", "60", "--trials", "2"]
    p = run_benchmark("s3_throttle.py", *args, "--json", str(out))
    assert p.returncode == 0, p.stderr
    r = json.loads(out.read_text())
    assert set(r["sides"]) == {"adaptive", "fixed", "oracle"}
    for side in r["sides"].values():
        assert side["digests_equal_object"] and len(side["trials"]) == 2
    adaptive = r["sides"]["adaptive"]
    assert adaptive["gave_up"] == 0 and adaptive["trials"][0]["digest"] == r["expected_digest"]
    assert "adaptive / oracle" in p.stdout
