"""ObjectStore against a real S3 server (moto on 127.0.0.1), directly and through the proxy."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import pytest
from s3util import (
    BUCKET,
    FAST_RETRY,
    OBJECTS,
    PREFIX,
    SMALL,
    STALL_S,
    S3Fixture,
    StoreFactory,
    expected,
    until_a_fault,
)

from headrace.emulate import FaultRule, LatencyProxy
from headrace.errors import (
    ConfigError,
    ObjectNotFoundError,
    PermissionDeniedError,
    ReadEOFError,
    StorageError,
    TransientStorageError,
)
from headrace.io import ObjectStore, RetryPolicy

pytestmark = pytest.mark.integration

URL = f"s3://{BUCKET}/{PREFIX}"


def _digest(parts: list[memoryview]) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(len(p).to_bytes(8, "little"))
        h.update(p)
    return h.hexdigest()


def test_whole_and_range_reads(open_store: StoreFactory) -> None:
    store = open_store()
    big = expected("big.bin")
    assert store.url == URL
    assert bytes(store.get("big.bin")) == big
    assert bytes(store.get("empty.bin")) == b""
    assert bytes(store.get(SMALL[3])) == expected(SMALL[3])
    assert store.size("big.bin") == len(big)
    assert bytes(store.get_range("big.bin", 1_000_003, 65_537)) == big[1_000_003:1_065_540]
    assert bytes(store.get_range("big.bin", len(big) - 1, 1)) == big[-1:]


def test_an_http_endpoint_needs_no_allow_http(s3: S3Fixture) -> None:
    # What users write for MinIO or moto: an http:// endpoint and nothing else.
    opts = {k: v for k, v in s3.options().items() if k != "allow_http"}
    with ObjectStore(URL, **opts) as store:  # type: ignore[arg-type]
        assert bytes(store.get(SMALL[0])) == expected(SMALL[0])
    with ObjectStore(URL, **opts, allow_http=False) as store:  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match=r"plain http:// .*pass allow_http=True"):
            store.get(SMALL[0])


def test_an_https_endpoint_of_a_plain_http_server_is_told_to_use_http(s3: S3Fixture) -> None:
    # moto speaks plain HTTP, as MinIO on localhost does: https:// in front of it was
    # retried for connect_retry_s (10 s) as "error sending request", saying nothing more.
    plain = s3.options()["endpoint"]
    assert isinstance(plain, str) and plain.startswith("http://")
    host = plain.removeprefix("http://")
    opts = {**s3.options(), "endpoint": f"https://{host}"}
    with ObjectStore(URL, **opts) as store:  # type: ignore[arg-type]
        with pytest.raises(
            StorageError,
            match=rf"^{URL}/{SMALL[0]}: https://{host} does not answer in TLS \(a plain HTTP "
            rf"server\?\): give the endpoint as http://{host}, which allows plain HTTP \(",
        ) as exc:
            store.get(SMALL[0])
        assert not isinstance(exc.value, TransientStorageError)  # not retried
        assert store.stats.attempts == 1


def test_virtual_hosted_requests_to_an_endpoint_that_names_no_bucket_are_refused(
    s3: S3Fixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # obstore sends virtual-hosted requests to the endpoint as given (boto3 puts the bucket
    # in its host): s3://headrace-test/data/k asked moto for /data/k, read as bucket "data".
    # Before: that other bucket's object was served.
    client = s3.server.info.boto3_client()
    s3.server.create_bucket(PREFIX)
    client.put_object(Bucket=PREFIX, Key=SMALL[0], Body=b"another bucket's object")
    try:
        opts = {**s3.options(), "path_style": False}
        refused = r"^s3://headrace-test/data: path_style=False .*name the bucket \(headrace-test\."
        with pytest.raises(ConfigError, match=refused):
            ObjectStore(URL, **opts)  # type: ignore[arg-type]
        monkeypatch.setenv("AWS_VIRTUAL_HOSTED_STYLE_REQUEST", "true")
        monkeypatch.setenv("AWS_ENDPOINT_URL", s3.server.info.endpoint)
        with pytest.raises(ConfigError, match=refused):
            ObjectStore(URL, access_key_id="testing", secret_access_key="testing")
        monkeypatch.delenv("AWS_VIRTUAL_HOSTED_STYLE_REQUEST")
        with ObjectStore(URL, **s3.options()) as store:  # type: ignore[arg-type]
            assert bytes(store.get(SMALL[0])) == expected(SMALL[0])
        # An endpoint whose host names the bucket is what virtual-hosted requests need.
        named = s3.server.info.endpoint.replace("127.0.0.1", f"{BUCKET}.localhost")
        ObjectStore(URL, **{**opts, "endpoint": named}).close()  # type: ignore[arg-type]
    finally:
        client.delete_object(Bucket=PREFIX, Key=SMALL[0])
        client.delete_bucket(Bucket=PREFIX)


def test_check_takes_yes_no_store_options_from_the_command_line(
    s3: S3Fixture, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: path_style=false reached ObjectStore as the string "false", read as True-ish
    # and turned into path-style requests; now a flag, and false is virtual-hosted here.
    from headrace.cli import main

    info = s3.server.info
    args = ["check", f"{URL}/small/", "--format", "raw", "--batch-size", "16"]
    opts = [f"endpoint={info.endpoint}", f"region={info.region}"]
    opts += [f"access_key_id={info.access_key_id}", f"secret_access_key={info.secret_access_key}"]
    flags = [x for o in opts for x in ("--store-option", o)]
    assert main([*args, *flags, "--store-option", "path_style=true"]) == 0
    assert "48 samples read" in capsys.readouterr().out
    assert main([*args, *flags, "--store-option", "path_style=false"]) == 2
    assert "path_style=False (virtual-hosted-style requests)" in capsys.readouterr().err


@pytest.mark.parametrize("allow", [None, "true", "false"])
def test_an_http_endpoint_from_the_environment_works_as_obstore_documents_it(
    s3: S3Fixture, monkeypatch: pytest.MonkeyPatch, allow: str | None
) -> None:
    # Everything from the environment, as a user of MinIO or moto writes it: the store
    # options headrace passes (a timeout) used to replace obstore's own reading of
    # AWS_ALLOW_HTTP, so this was refused, blaming an allow_http=False nobody gave.
    info = s3.server.info
    monkeypatch.setenv("AWS_ENDPOINT_URL", info.endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", info.access_key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", info.secret_access_key)
    monkeypatch.setenv("AWS_REGION", info.region)
    monkeypatch.setenv("AWS_VIRTUAL_HOSTED_STYLE_REQUEST", "false")
    if allow is None:
        monkeypatch.delenv("AWS_ALLOW_HTTP", raising=False)
    else:
        monkeypatch.setenv("AWS_ALLOW_HTTP", allow)
    with ObjectStore(URL, retry=FAST_RETRY) as store:
        if allow == "false":
            with pytest.raises(ConfigError, match=r"plain http:// .*AWS_ALLOW_HTTP"):
                store.get(SMALL[0])
        else:
            assert bytes(store.get(SMALL[0])) == expected(SMALL[0])


@pytest.mark.parametrize(
    ("call", "said"),
    [
        ("get", f"{URL}/{SMALL[0]}: the store was closed during the read"),
        ("get_many", f"{URL}: store was closed during get_many"),
        ("list_info", f"{URL}: store was closed during a listing"),
    ],
)
def test_closing_a_store_ends_a_stalled_get_at_once(
    s3: S3Fixture, proxy: LatencyProxy, call: str, said: str
) -> None:
    # Every GET stalls 30 s, each try may take 10: closed from another thread, the read
    # ends now, saying why, instead of waiting out its tries (what close() under a stalled
    # store waited for).
    import threading
    import time

    from headrace.errors import StorageError

    opts = {**s3.options(), "endpoint": proxy.endpoint}
    store = ObjectStore(URL, **opts, retry=RetryPolicy(attempts=3, timeout_s=10))  # type: ignore[arg-type]
    proxy.set_faults([FaultRule(kind="stall", stall_s=30, match="GET ")])
    got: list[BaseException] = []

    def get() -> None:
        try:
            if call == "get":
                store.get(SMALL[0])
            elif call == "get_many":
                store.get_many(SMALL[:3])
            else:
                store.list_info()
        except BaseException as exc:
            got.append(exc)

    reader = threading.Thread(target=get)
    reader.start()
    until_a_fault(proxy)  # the GET is stalled at the proxy
    t0 = time.monotonic()
    store.close()
    reader.join(timeout=30)
    took = time.monotonic() - t0
    proxy.set_faults([])
    # At once: milliseconds; before, the read waited out its tries (3 x 10 s = 30 s). The
    # bound, a third of that, leaves a wide margin for a loaded machine.
    assert not reader.is_alive() and took < 10, took
    assert len(got) == 1 and isinstance(got[0], StorageError), got
    assert said in str(got[0])


def test_get_first_is_one_get_where_stat_and_get_range_were_two(
    open_store: StoreFactory, proxy: LatencyProxy
) -> None:
    store = open_store(proxy.endpoint)
    big, small = expected("big.bin"), expected(SMALL[5])
    data, info = store.get_first("big.bin", 1000)
    assert bytes(data) == big[:1000] and info.size == len(big)
    data, info2 = store.get_first(SMALL[5], 1 << 20)  # the whole object
    assert bytes(data) == small and info2.size == len(small)
    assert proxy.stats.requests == 2
    stats = store.stats
    assert (stats.requests, stats.attempts, stats.bytes) == (2, 2, 1000 + len(small))
    data, info3 = store.get_first("empty.bin", 8)  # 416 on the range, then a whole GET
    assert bytes(data) == b"" and info3.size == 0
    with pytest.raises(ObjectNotFoundError, match=rf"{URL}/missing\.bin: no such object"):
        store.get_first("missing.bin", 8)
    assert proxy.stats.requests == 2 + 2 + 1
    assert store.stats.failures == 2 and store.stats.retries == 0
    assert (info, info2) == (store.stat("big.bin"), store.stat(SMALL[5]))  # HEAD agrees


def test_get_first_retries_a_cut_body(open_store: StoreFactory, proxy: LatencyProxy) -> None:
    proxy.set_faults([FaultRule(kind="truncate", limit=1)])
    store = open_store(proxy.endpoint)
    data, info = store.get_first("big.bin", 100_000)
    assert bytes(data) == expected("big.bin")[:100_000] and info.size == OBJECTS["big.bin"]
    assert proxy.stats.faults == 1 and store.stats.retries == 1


@pytest.mark.parametrize("kind", ["short", "truncate", "status"])
def test_get_first_failures_name_the_range(
    kind: Literal["short", "truncate", "status"], open_store: StoreFactory, proxy: LatencyProxy
) -> None:
    # Its GET is ranged, as get_range's: a token file's header probe that gave up said
    # only the object, where every other ranged read says "bytes [a, b)".
    proxy.set_faults([FaultRule(kind=kind, status=500, match="big.bin")])
    store = open_store(proxy.endpoint)
    with pytest.raises(StorageError) as err:
        store.get_first("big.bin", 128)
    assert f"{URL}/big.bin, bytes [0, 128): " in str(err.value)


def test_get_ranges_in_caller_order(open_store: StoreFactory) -> None:
    store = open_store()
    big = expected("big.bin")
    ranges = [(3_000_000, 4096), (0, 100), (2_000_000, 1), (10, 0), (5000, 70_000)]
    got = store.get_ranges("big.bin", ranges)
    assert [bytes(g) for g in got] == [big[o : o + n] for o, n in ranges]
    uncoalesced = store.get_ranges("big.bin", ranges, coalesce=0)
    assert [bytes(g) for g in uncoalesced] == [big[o : o + n] for o, n in ranges]


def test_list(open_store: StoreFactory) -> None:
    store = open_store()
    assert store.list() == sorted(OBJECTS.items())
    assert store.list("small/") == [(k, OBJECTS[k]) for k in SMALL]
    assert store.list("nothing-here/") == []


def test_get_many_order_and_depth(open_store: StoreFactory, proxy: LatencyProxy) -> None:
    # 10 ms per request through the proxy makes requests overlap for sure.
    proxy.latency_ms = 10
    try:
        store = open_store(proxy.endpoint)
        requests: list[str | tuple[str, int, int]] = [*SMALL, ("big.bin", 123, 4567), "empty.bin"]
        out = store.get_many(requests, max_in_flight=16)
    finally:
        proxy.latency_ms = 0
    big = expected("big.bin")
    assert [bytes(o) for o in out] == [*(expected(k) for k in SMALL), big[123:4690], b""]
    stats = store.stats
    assert stats.requests == len(requests)
    assert 1 < stats.max_in_flight_observed <= 16
    assert proxy.stats.max_in_flight > 1
    assert len(stats.latencies_s) == len(requests)


def test_same_bytes_as_local_files(open_store: StoreFactory, local_dir: Path) -> None:
    requests: list[str | tuple[str, int, int]] = [
        *SMALL,
        "big.bin",
        ("big.bin", 777, 300_000),
        *((k, 17, 100) for k in SMALL[:8]),
    ]
    remote = open_store().get_many(requests)
    with ObjectStore(local_dir.as_uri()) as local:
        assert _digest(local.get_many(requests)) == _digest(remote)
        assert local.list() == open_store().list()


@pytest.mark.parametrize("status", [500, 503, 429])
def test_transient_status_is_retried(
    open_store: StoreFactory, proxy: LatencyProxy, status: int
) -> None:
    # Each chosen key fails once (a per-key schedule, so concurrency cannot make one
    # request unlucky several times in a row).
    flaky = [*SMALL[::3], "big.bin"]
    proxy.set_faults([FaultRule(status=status, match=k, limit=1) for k in flaky])
    store = open_store(proxy.endpoint)
    out = store.get_many(SMALL, max_in_flight=8)
    assert [bytes(o) for o in out] == [expected(k) for k in SMALL]
    assert bytes(store.get_range("big.bin", 5, 10)) == expected("big.bin")[5:15]
    assert store.stats.retries == len(flaky)
    assert proxy.stats.faults == len(flaky)


def test_dropped_and_truncated_responses_are_retried(
    open_store: StoreFactory, proxy: LatencyProxy
) -> None:
    proxy.set_faults(
        [FaultRule(kind="drop", match=SMALL[0], limit=1), FaultRule(kind="truncate", limit=2)]
    )
    store = open_store(proxy.endpoint)
    assert bytes(store.get(SMALL[0])) == expected(SMALL[0])
    assert bytes(store.get("big.bin")) == expected("big.bin")
    assert proxy.stats.faults == 3
    assert store.stats.retries == 3


def test_truncated_body_is_never_returned(open_store: StoreFactory, proxy: LatencyProxy) -> None:
    proxy.set_faults([FaultRule(kind="truncate")])
    store = open_store(proxy.endpoint)
    with pytest.raises(TransientStorageError, match=rf"{URL}/big\.bin.*cut short.*4 attempts"):
        store.get("big.bin")
    with pytest.raises(
        TransientStorageError, match=rf"{URL}/big\.bin, bytes \[10, 100010\).*cut short"
    ):
        store.get_range("big.bin", 10, 100_000)
    with pytest.raises(TransientStorageError, match=rf"{SMALL[0]}.*cut short"):
        store.get_many(SMALL[:4])


def test_permission_denied_is_not_retried(open_store: StoreFactory, proxy: LatencyProxy) -> None:
    proxy.set_faults([FaultRule(status=403, match=SMALL[2])])
    store = open_store(proxy.endpoint)
    with pytest.raises(PermissionDeniedError, match=rf"{URL}/{SMALL[2]}: access denied"):
        store.get(SMALL[2])
    with pytest.raises(PermissionDeniedError, match=rf"{URL}/{SMALL[2]}, bytes \[0, 8\)"):
        store.get_many([SMALL[1], (SMALL[2], 0, 8)])
    assert proxy.stats.faults == 2
    assert store.stats.retries == 0


def test_missing_object_is_not_retried(open_store: StoreFactory, proxy: LatencyProxy) -> None:
    store = open_store(proxy.endpoint)
    with pytest.raises(ObjectNotFoundError, match=rf"{URL}/missing\.bin: no such object"):
        store.get("missing.bin")
    with pytest.raises(ObjectNotFoundError, match=rf"{URL}/missing\.bin, bytes \[4, 8\)"):
        store.get_range("missing.bin", 4, 4)
    with pytest.raises(ObjectNotFoundError, match=rf"{URL}/missing\.bin"):
        store.size("missing.bin")
    with pytest.raises(ObjectNotFoundError, match=rf"{URL}/missing\.bin"):
        store.get_many([*SMALL[:5], "missing.bin"])
    assert proxy.stats.requests == 3 + 6
    assert store.stats.retries == 0


def test_a_missing_bucket_is_named(open_store: StoreFactory) -> None:
    store = open_store(url="s3://no-such-bucket/data")
    with pytest.raises(ObjectNotFoundError, match=r"^s3://no-such-bucket/data/a: no such bucket"):
        store.get("a")


def test_wrong_bucket_is_not_found(open_store: StoreFactory) -> None:
    store = open_store(url="s3://no-such-bucket/x")
    with pytest.raises(ObjectNotFoundError, match=r"s3://no-such-bucket/x/k"):
        store.get("k")


def test_timeout_is_retried_then_reported(open_store: StoreFactory, proxy: LatencyProxy) -> None:
    # 1 s a try: 100 times a lone small GET's (10 ms unloaded), so only the stall (30 s,
    # never answered in time) times out, however loaded the machine.
    quick = RetryPolicy(attempts=2, base_delay_s=0.01, timeout_s=1.0)
    proxy.set_faults([FaultRule(kind="stall", stall_s=STALL_S, match=SMALL[5], limit=1)])
    store = open_store(proxy.endpoint, retry=quick)
    assert bytes(store.get(SMALL[5])) == expected(SMALL[5])
    assert store.stats.retries == 1
    proxy.set_faults([FaultRule(kind="stall", stall_s=STALL_S, match=SMALL[6])])
    with pytest.raises(
        TransientStorageError, match=rf"{URL}/{SMALL[6]}, bytes \[0, 64\): timed out.*2 attempts"
    ):
        store.get_range(SMALL[6], 0, 64)
    assert proxy.stats.faults == 3


def test_read_past_end(open_store: StoreFactory) -> None:
    store = open_store()
    size = OBJECTS["big.bin"]
    with pytest.raises(
        ReadEOFError, match=rf"{URL}/big\.bin, bytes \[{size - 10}, {size + 90}\).*{size} bytes"
    ):
        store.get_range("big.bin", size - 10, 100)
    with pytest.raises(ReadEOFError, match=rf"bytes \[{size + 5}, {size + 6}\).*{size} bytes"):
        store.get_range("big.bin", size + 5, 1)
    with pytest.raises(ReadEOFError, match=rf"bytes \[{size}, {size + 1}\)"):
        store.get_many([("big.bin", 0, 1), ("big.bin", size, 1)])
    with pytest.raises(ReadEOFError, match=rf"bytes \[{size - 1}, {size + 1}\)"):
        store.get_ranges("big.bin", [(0, 1), (size - 1, 2)])
    assert store.stats.retries == 0


def test_unreachable_endpoint_gives_up(s3: S3Fixture, open_store: StoreFactory) -> None:
    # A port nobody listens on: connection refused, retried for connect_retry_s, then reported.
    with LatencyProxy(s3.server.endpoint) as gone:
        endpoint = gone.endpoint
    policy = RetryPolicy(
        attempts=2, base_delay_s=0.01, max_delay_s=0.1, timeout_s=1.0, connect_retry_s=0.5
    )
    store = open_store(endpoint, retry=policy)
    with pytest.raises(
        TransientStorageError,
        match=rf"{URL}/big\.bin: connection failed .*gave up after \d+ attempts in 0\.[3-5] s: "
        r"connection failures are retried for up to connect_retry_s=0\.5 s\)$",
    ):
        store.get("big.bin")
    assert store.stats.attempts > 2


def test_consistently_short_body_is_detected(open_store: StoreFactory, proxy: LatencyProxy) -> None:
    # The server's Content-Length agrees with its short body: only our length check on
    # ranges sees it. (A whole GET has no other source of truth for the size; see docs.)
    proxy.set_faults([FaultRule(kind="short", match="big.bin")])
    store = open_store(proxy.endpoint)
    size = OBJECTS["big.bin"]
    with pytest.raises(
        TransientStorageError,
        match=rf"big\.bin, bytes \[0, 1000\): .*cut short \(500 of 1000 bytes; object has {size}",
    ):
        store.get_range("big.bin", 0, 1000)
    with pytest.raises(TransientStorageError, match=r"big\.bin, bytes \[8, 108\).*cut short"):
        store.get_many([(SMALL[0], 0, 10), ("big.bin", 8, 100)])
    with pytest.raises(
        TransientStorageError,
        match=rf"big\.bin, bytes \[0, 1000\): .*cut short \(500 of 1000 bytes; object has {size}",
    ):
        store.get_first("big.bin", 1000)  # one ranged GET: Content-Range has the size
    proxy.set_faults([FaultRule(kind="short", match="big.bin", limit=1)])
    assert bytes(store.get_range("big.bin", 0, 1000)) == expected("big.bin")[:1000]


def test_probe_an_object(
    s3: S3Fixture,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``headrace probe s3://...``: ranged GETs of one object, every result verified."""
    from headrace.cli import main

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    out = tmp_path / "probe.json"
    url = f"{s3.url}/big.bin"
    args = ["probe", url, "--endpoint", s3.server.endpoint, "--region", "us-east-1"]
    assert main([*args, "--ops", "8", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["path"] == url and report["filesystem"]["fstype"] == "s3"
    assert report["file_bytes"] == OBJECTS["big.bin"]
    got = {(r["request_bytes"], r["in_flight"]) for r in report["results"]}
    assert got == {(s, d) for s in (4096, 4100, 1 << 20) for d in (1, 8, 32, 64)}  # 3 MiB object
    # The 8 MiB request does not fit: said, not left out silently.
    why = f"the object has {OBJECTS['big.bin']:,} bytes, fewer than one request"
    assert report["skipped"] == [{"mode": "get", "request_bytes": 8 << 20, "reason": why}]
    for r in report["results"]:
        assert r["mode"] == "get" and r["verified"] and r["ops"] >= 2 and r["mb_per_s"] > 0
    table = capsys.readouterr().out
    assert "B requests: best" in table
    assert "skipped 8388608-byte requests: the object has" in table
    assert main([*args[:1], f"{s3.url}/nope.bin", *args[2:]]) == 2
    assert "nope.bin" in capsys.readouterr().err
    assert main([*args[:1], f"{s3.url}/empty.bin", *args[2:]]) == 2
    assert "empty.bin: 0 bytes is too small to probe" in capsys.readouterr().err


def test_probe_an_object_fills_every_depth_it_names(
    s3: S3Fixture, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The byte budget cut 8 MiB requests to 16 a round, so their "32" and "64 in flight"
    rows had 16 at most; the budget now never cuts a round below its depth."""
    from headrace.bench import _probe_objects
    from headrace.cli import main

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setattr(_probe_objects, "SIZES", (4096, 1 << 20))
    monkeypatch.setattr(_probe_objects, "_BUDGET", 4 << 20)  # 4 requests of 1 MiB
    out = tmp_path / "probe.json"
    url = f"{s3.url}/big.bin"
    args = ["probe", url, "--endpoint", s3.server.endpoint, "--region", "us-east-1"]
    assert main([*args, "--row-bytes", "4096", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert {r["request_bytes"] for r in report["results"]} == {4096, 1 << 20}
    for r in report["results"]:
        assert r["ops"] // report["rounds"] >= r["in_flight"], r
        assert r["in_flight_reached"] == r["in_flight"] and r["verified"], r


def test_probe_an_object_timed_0_s_writes_no_infinity(
    s3: S3Fixture,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A measurement timed 0 s (a clock that never moves here) wrote Infinity as its
    rates, which JSON readers refuse: null now, and ``-`` in the table."""
    from types import SimpleNamespace

    from headrace.bench import _probe_objects
    from headrace.cli import main

    def no_constant(name: str) -> None:
        raise AssertionError(f"the JSON holds {name}")

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setattr(_probe_objects, "SIZES", (4096,))
    monkeypatch.setattr(_probe_objects, "time", SimpleNamespace(perf_counter=lambda: 5.0))
    out = tmp_path / "probe.json"
    args = ["probe", f"{s3.url}/big.bin", "--endpoint", s3.server.endpoint]
    assert main([*args, "--row-bytes", "4096", "--ops", "16", "--json", str(out)]) == 0
    report = json.loads(out.read_text(), parse_constant=no_constant)
    assert report["results"] and all(
        r["ops_per_s"] is None and r["mb_per_s"] is None and r["verified"]
        for r in report["results"]
    )
    printed = capsys.readouterr().out
    assert "timed 0 s (quicker than the clock ticks): no rate" in printed
    assert "x one at a time" not in printed  # no gain to give without rates


def _closed_while_reading(
    store: ObjectStore, read: Callable[[], object], n: int
) -> list[Exception]:
    """Close ``store`` once ``read`` (in a thread) has ``n`` tries in flight: its errors."""
    errors: list[Exception] = []

    def run() -> None:
        try:
            read()
        except Exception as exc:
            errors.append(exc)

    reader = threading.Thread(target=run)
    reader.start()
    deadline = time.monotonic() + 30
    while store.stats.in_flight < n and time.monotonic() < deadline:
        time.sleep(0.01)
    store.close()
    reader.join(30)
    while store.stats.in_flight and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not reader.is_alive()
    return errors


def test_reads_cut_short_by_close_are_counted_as_cancelled_not_failures(
    s3: S3Fixture, proxy: LatencyProxy
) -> None:
    # A loader's close() (each epoch of a TorchDataset) cancels its read-ahead's GETs:
    # until 2026-12-03 each counted in `failures`, so a healthy run's stats said 8
    # failures an epoch, and an alert on them fired for nothing.
    proxy.latency_ms = 2000
    store = ObjectStore(s3.url, **{**s3.options(), "endpoint": proxy.endpoint})
    try:
        errors = _closed_while_reading(store, lambda: store.get_many(SMALL[:8], max_in_flight=8), 8)
    finally:
        proxy.latency_ms = 0
    stats = store.stats
    assert errors
    assert (stats.requests, stats.failures, stats.cancelled, stats.in_flight) == (0, 0, 8, 0)
    assert stats.attempts == stats.requests + stats.retries + stats.failures + stats.cancelled


def test_a_stalled_get_cut_by_close_is_counted_as_cancelled(
    s3: S3Fixture, proxy: LatencyProxy
) -> None:
    # A plain get() stalled in the server: close() stops the store's loop, which ends it.
    proxy.set_faults([FaultRule(kind="stall", stall_s=STALL_S, match="GET ")])
    store = ObjectStore(s3.url, **{**s3.options(), "endpoint": proxy.endpoint})
    try:
        errors = _closed_while_reading(store, lambda: store.get(SMALL[0]), 1)
    finally:
        proxy.set_faults([])
    assert len(errors) == 1 and "the store was closed" in str(errors[0]), errors
    stats = store.stats
    assert (stats.attempts, stats.failures, stats.cancelled, stats.in_flight) == (1, 0, 1, 0)
