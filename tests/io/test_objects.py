"""ObjectStore on local directories (file:// and plain paths), its retry policy and error map.

The S3 tests, against a real moto server, are in tests/integration/test_objects_s3.py;
az:// and gs:// against Azurite and fake-gcs-server in tests/integration/test_objects_cloud.py.
"""

from __future__ import annotations

import hashlib
import random
import re
import socket
import threading
from collections.abc import Callable
from pathlib import Path

import obstore.exceptions as obx
import pytest

from headrace.errors import (
    ConfigError,
    ObjectNotFoundError,
    PermissionDeniedError,
    ReadEOFError,
    StorageError,
    TransientStorageError,
)
from headrace.io import ObjectStore, RetryPolicy
from headrace.io._retry import classify, summarize


def _data(n: int, seed: int = 0) -> bytes:
    return random.Random(seed).randbytes(n)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.bin").write_bytes(_data(10_000, 1))
    (tmp_path / "sub" / "b.bin").write_bytes(_data(777, 2))
    (tmp_path / "empty.bin").write_bytes(b"")
    return tmp_path


@pytest.mark.parametrize("as_url", [True, False], ids=["file-url", "plain-path"])
def test_local_reads(root: Path, as_url: bool) -> None:
    url = root.as_uri() if as_url else str(root)
    a = (root / "a.bin").read_bytes()
    with ObjectStore(url) as store:
        assert store.url == root.as_uri()
        assert bytes(store.get("a.bin")) == a
        assert bytes(store.get("empty.bin")) == b""
        assert store.size("a.bin") == len(a)
        assert bytes(store.get_range("a.bin", 123, 456)) == a[123:579]
        assert bytes(store.get_range("a.bin", 5, 0)) == b""
        ranges = [(9000, 1000), (0, 10), (50, 0), (10, 1)]
        got = store.get_ranges("a.bin", ranges)
        assert [bytes(g) for g in got] == [a[o : o + n] for o, n in ranges]
        before = store.stats.requests
        assert [bytes(g) for g in store.get_ranges("missing.bin", [(0, 0), (7, 0)])] == [b""] * 2
        assert store.stats.requests == before  # nothing asked: no request (not even a 404)
        assert store.list() == [("a.bin", 10_000), ("empty.bin", 0), ("sub/b.bin", 777)]
        assert store.list("sub") == [("sub/b.bin", 777)]


def test_get_many_keeps_request_order_and_counts(root: Path) -> None:
    a = (root / "a.bin").read_bytes()
    b = (root / "sub" / "b.bin").read_bytes()
    requests = ["sub/b.bin", ("a.bin", 100, 50), "a.bin", ("a.bin", 0, 0)] * 10
    with ObjectStore(root) as store:
        out = store.get_many(requests, max_in_flight=8)
        assert [bytes(x) for x in out] == [b, a[100:150], a, b""] * 10
        stats = store.stats
        assert stats.requests == 30  # zero-length ranges need no request
        assert stats.bytes == 10 * (777 + 50 + 10_000)
        assert stats.retries == 0
        assert 1 <= stats.max_in_flight_observed <= 8
        assert len(stats.latencies_s) == 30
        store.reset_stats()
        assert store.stats.requests == 0
        assert store.get_many([]) == []


def test_read_past_end_names_url_and_range(root: Path) -> None:
    with ObjectStore(root) as store:
        with pytest.raises(ReadEOFError, match=r"a\.bin, bytes \[9990, 10090\).*10000 bytes"):
            store.get_range("a.bin", 9990, 100)
        with pytest.raises(ReadEOFError, match=r"a\.bin, bytes \[20000, 20010\).*10000 bytes"):
            store.get_range("a.bin", 20_000, 10)
        with pytest.raises(ReadEOFError, match=r"a\.bin, bytes \[9999, 10001\)"):
            store.get_ranges("a.bin", [(0, 10), (9999, 2)])
        with pytest.raises(ReadEOFError, match=r"a\.bin, bytes \[9999, 10001\)"):
            store.get_many([("a.bin", 0, 10), ("a.bin", 9999, 2)])
        with pytest.raises(ReadEOFError, match=r"a\.bin, bytes \[20000, 20010\).*10000 bytes"):
            store.get_many([("a.bin", 20_000, 10)])
        # Nothing retried: EOF is permanent.
        assert store.stats.retries == 0


def test_eof_names_the_size_when_the_first_head_fails_at_once(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Fault injection: the HEAD that finds the size goes out on a pooled connection the
    # server closed after its 416 (seen on fake-gcs-server); a second HEAD answers.
    import headrace.io._objects as objects_mod

    calls: list[str] = []
    real_head, real_ahead = objects_mod.obs.head, objects_mod.obs.head_async
    dropped = obx.GenericError("Error performing HEAD - HTTP error: error sending request")

    def head(store: object, key: str) -> object:
        calls.append(key)
        if len(calls) % 2:
            raise dropped
        return real_head(store, key)  # type: ignore[arg-type]

    async def ahead(store: object, key: str) -> object:
        calls.append(key)
        if len(calls) % 2:
            raise dropped
        return await real_ahead(store, key)  # type: ignore[arg-type]

    monkeypatch.setattr(objects_mod.obs, "head", head)
    monkeypatch.setattr(objects_mod.obs, "head_async", ahead)
    with ObjectStore(root) as store:
        with pytest.raises(ReadEOFError, match=r"bytes \[20000, 20010\).*has 10000 bytes"):
            store.get_range("a.bin", 20_000, 10)
        with pytest.raises(ReadEOFError, match=r"bytes \[20000, 20010\).*has 10000 bytes"):
            store.get_many([("a.bin", 20_000, 10)])
    assert calls == ["a.bin"] * 4
    calls.clear()

    async def broken(*_: object) -> object:
        calls.append("x")
        return 1 / 0

    # get_range runs on the store's loop: its HEAD is obstore's head_async.
    monkeypatch.setattr(objects_mod.obs, "head_async", broken)
    with ObjectStore(root) as store, pytest.raises(ReadEOFError, match=r"20010\): range"):
        store.get_range("a.bin", 20_000, 10)  # a HEAD that fails for good: no size, no retry
    assert calls == ["x"]


def test_a_whole_get_whose_body_falls_short_of_its_range_is_retried_then_refused(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Fault injection: a whole-object GET answers with a range of 10,000 bytes and a
    # body of 5,000 (a proxy's cut that kept the headers). The bytes must not be returned
    # as the object: once, the GET is asked again; every time, the error names the object.
    import headrace.io._objects as objects_mod

    real = objects_mod.obs.get_async
    cuts = [0]

    class Cut:
        def __init__(self, result: object) -> None:
            self._result = result
            self.range = result.range  # type: ignore[attr-defined]
            self.meta = result.meta  # type: ignore[attr-defined]
            self.attributes = result.attributes  # type: ignore[attr-defined]

        async def bytes_async(self) -> bytes:
            body = bytes(await self._result.bytes_async())  # type: ignore[attr-defined]
            if cuts[0] == 0:
                return body
            cuts[0] -= 1
            return body[: len(body) // 2]

    async def get_async(store: object, key: str, **kwargs: object) -> Cut:
        return Cut(await real(store, key, **kwargs))  # type: ignore[arg-type]

    monkeypatch.setattr(objects_mod.obs, "get_async", get_async)
    a = (root / "a.bin").read_bytes()
    policy = RetryPolicy(attempts=3, base_delay_s=0.001)
    with ObjectStore(root, retry=policy) as store:
        cuts[0] = 1
        assert bytes(store.get("a.bin")) == a
        assert store.stats.retries == 1
        cuts[0] = 1
        assert [bytes(v) for v in store.get_many(["a.bin"])] == [a]
        cuts[0] = 10
        with pytest.raises(
            TransientStorageError, match=r"a\.bin: response body was cut short \(5000 of 10000"
        ):
            store.get("a.bin")


def test_stat_and_aread_into(root: Path) -> None:
    import asyncio

    import numpy as np

    want = (root / "a.bin").read_bytes()
    with ObjectStore(root) as store:
        info = store.stat("a.bin")
        assert info.size == 10_000 and info.etag
        out = np.zeros(300, dtype=np.uint8)
        asyncio.run(store.aread_into("a.bin", 100, out, expect=info))
        assert out.tobytes() == want[100:400]
        asyncio.run(store.aread_into("a.bin", 0, np.zeros(0, dtype=np.uint8)))  # nothing to read
        with pytest.raises(ReadEOFError, match=r"a\.bin, bytes \[9990, 10090\)"):
            asyncio.run(store.aread_into("a.bin", 9990, np.zeros(100, dtype=np.uint8)))
        with pytest.raises(ConfigError, match="read-only"):
            asyncio.run(store.aread_into("a.bin", 0, memoryview(b"abcd")))
        with pytest.raises(
            StorageError,
            match=r"a\.bin, bytes \[0, 10\): the object changed while "
            r"open: it had 9999 bytes",
        ):
            asyncio.run(
                store.aread_into(
                    "a.bin", 0, np.zeros(10, dtype=np.uint8), expect=info._replace(size=9999)
                )
            )
        # Shrunk since stat(): a range that fit then is past the end now.
        with pytest.raises(
            ReadEOFError,
            match=r"a\.bin, bytes \[15000, 15100\): the object changed while open: it had "
            r"20000 bytes, now it ends before this range",
        ):
            asyncio.run(
                store.aread_into(
                    "a.bin",
                    15_000,
                    np.zeros(100, dtype=np.uint8),
                    expect=info._replace(size=20_000),
                )
            )
        with pytest.raises(ObjectNotFoundError, match=r"/nope\.bin"):
            store.stat("nope.bin")
        assert store.stats.retries == 0


def test_get_first_reads_the_start_with_size_and_etag(root: Path) -> None:
    a = (root / "a.bin").read_bytes()
    with ObjectStore(root) as store:
        data, info = store.get_first("a.bin", 100)
        assert bytes(data) == a[:100] and info == store.stat("a.bin")
        data, info = store.get_first("a.bin", 1 << 20)  # longer than the object: all of it
        assert bytes(data) == a and info.size == 10_000
        data, info = store.get_first("empty.bin", 100)  # no byte 0: a whole-object GET
        assert bytes(data) == b"" and info.size == 0 and info.etag
        assert store.stats.failures == 1  # the ranged GET of the empty object
        with pytest.raises(ObjectNotFoundError, match=r"/nope\.bin: no such object"):
            store.get_first("nope.bin", 10)
        with pytest.raises(ConfigError, match=r"a\.bin: get_first needs a length >= 1"):
            store.get_first("a.bin", 0)


def test_missing_object(root: Path) -> None:
    with ObjectStore(root) as store:
        for call in (
            lambda: store.get("nope.bin"),
            lambda: store.size("nope.bin"),
            lambda: store.get_range("nope.bin", 0, 4),
            lambda: store.get_ranges("nope.bin", [(0, 4)]),
        ):
            with pytest.raises(ObjectNotFoundError, match=r"/nope\.bin"):
                call()
        with pytest.raises(ObjectNotFoundError, match=r"/nope\.bin") as info:
            store.get_many(["a.bin", "nope.bin", "sub/b.bin", "nope2.bin"], max_in_flight=1)
        # The earliest failure in request order is raised; with one in flight the reader
        # stops after it, so nope2.bin is never tried.
        assert "nope2" not in str(info.value)
        assert store.stats.retries == 0


def test_get_many_raises_earliest_failure_and_notes_others(root: Path) -> None:
    with ObjectStore(root) as store:
        with pytest.raises(ObjectNotFoundError, match=r"/x1\.bin") as info:
            store.get_many(["x1.bin", "x2.bin"], max_in_flight=2)
        assert any("1 more of 2 requests" in n for n in getattr(info.value, "__notes__", []))


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        (("ftp://host/x",), {}, "unsupported scheme 'ftp'"),
        (("s3:///prefix",), {}, "needs a bucket"),
        (("/definitely/not/here",), {}, "existing directory"),
        (("/tmp",), {"region": "us-east-1"}, "do not apply to local files"),
        (("s3://b",), {"config": {"no_such_option": 1}}, "cannot open store"),
        (("gs://",), {}, r"^gs://: a gs:// URL needs a bucket \(gs://bucket/prefix\)\.$"),
        (("az:///prefix",), {}, r"a az:// URL needs a container \(az://container/prefix\)"),
        (("gs://b/p",), {"path_style": True}, r"^gs://b/p: path_style applies to s3:// URLs only"),
        (("az://c/p",), {"region": "r", "access_key_id": "k"}, "region, access_key_id apply"),
        # "false" is truthy: path_style="false" meant path-style requests, the opposite.
        (("s3://b",), {"path_style": "false"}, r"^s3://b: path_style must be True, False or"),
        (("s3://b",), {"allow_http": "no"}, r"^s3://b: allow_http must be True, False or None"),
        # obstore took these and panicked at the first request (RelativeUrlWithoutBase)
        (("s3://b",), {"endpoint": ""}, r"^s3://b: endpoint '' is not an http:// or https://"),
        (("s3://b",), {"endpoint": "127.0.0.1:9000"}, "endpoint '127.0.0.1:9000' is not an"),
        (("az://c",), {"config": {"endpoint": "localhost"}}, "endpoint 'localhost' is not an"),
        (
            ("gs://b/p",),
            {"config": {"nonsense": 1}},
            r"^gs://b/p: cannot open store: .*'nonsense' is not valid for store 'GCS'\.$",
        ),
    ],
)
def test_bad_store_configuration(args: tuple[str], kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ObjectStore(*args, **kwargs)  # type: ignore[arg-type]


def test_gs_and_az_stores_open_without_a_request() -> None:
    # Each is tested against a real emulator in tests/integration/test_objects_cloud.py.
    with ObjectStore("gs://bucket/prefix") as gs:
        assert gs.url == "gs://bucket/prefix" and repr(gs) == "ObjectStore('gs://bucket/prefix')"
    with ObjectStore("az://container/prefix/", config={"account_name": "acct"}) as az:
        assert az.url == "az://container/prefix"


def test_azure_use_emulator_dials_the_endpoint_given() -> None:
    # obstore's use_emulator alone ignores the endpoint and dials 127.0.0.1:10000.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    store = ObjectStore(
        "az://box/pre",
        endpoint=f"http://127.0.0.1:{port}",
        config={"use_emulator": True},
        retry=RetryPolicy(attempts=1, timeout_s=5, connect_retry_s=0),
    )
    with store, pytest.raises(TransientStorageError) as info:
        store.get("k")
    assert str(info.value).startswith("az://box/pre/k: connection failed")
    assert f"GET http://127.0.0.1:{port}/devstoreaccount1/box/pre/k " in str(info.value)


def test_bad_arguments(root: Path) -> None:
    with ObjectStore(root) as store:
        with pytest.raises(ConfigError, match="offset=-1"):
            store.get_range("a.bin", -1, 5)
        with pytest.raises(ConfigError, match="length=-5"):
            store.get_ranges("a.bin", [(0, -5)])
        with pytest.raises(ConfigError, match="key or a"):
            store.get_many([("a.bin", 1)])  # type: ignore[list-item]
        with pytest.raises(ConfigError, match="max_in_flight"):
            store.get_many(["a.bin"], max_in_flight=0)
        with pytest.raises(ConfigError, match=r"max_in_flight .*\(got True\)"):
            store.get_many(["a.bin"], max_in_flight=True)  # as RequestQueue refuses it
        with pytest.raises(ConfigError, match=r"\.\./x"):
            store.get("../x")


def test_closed_store_refuses(root: Path) -> None:
    store = ObjectStore(root)
    store.get_many(["a.bin"])
    store.close()
    store.close()
    assert store.closed
    with pytest.raises(StorageError, match="store is closed"):
        store.get("a.bin")
    with pytest.raises(StorageError, match="store is closed"):
        store.get_many(["a.bin"])


def test_no_thread_leak_over_open_close_cycles(root: Path) -> None:
    # Warm up obstore's runtime once, then the thread count must stay flat.
    with ObjectStore(root) as store:
        store.get_many(["a.bin"])
    before = threading.active_count()
    digest = hashlib.sha256()
    for _ in range(200):
        with ObjectStore(root.as_uri()) as store:
            digest.update(store.get("sub/b.bin"))
            digest.update(store.get_many([("a.bin", 0, 16)])[0])
    assert threading.active_count() == before
    assert threading.active_count() <= before


def test_retry_policy_validation_and_delays() -> None:
    for bad in (
        {"attempts": 0},
        {"base_delay_s": -1.0},
        {"max_delay_s": -1.0},
        {"timeout_s": 0.0},
    ):
        with pytest.raises(ConfigError):
            RetryPolicy(**bad)  # type: ignore[arg-type]
    policy = RetryPolicy(base_delay_s=0.1, max_delay_s=0.3)
    rng = random.Random(0)
    for retry, cap in [(1, 0.1), (2, 0.2), (3, 0.3), (8, 0.3)]:
        for _ in range(20):
            d = policy.delay_s(retry, rng)
            assert cap / 2 <= d < cap


_BODY_404 = "Server returned non-2xx status code: 404 Not Found: <Error/>\n\nDebug source:\n..."


@pytest.mark.parametrize(
    ("exc", "cls", "transient"),
    [
        (obx.NotFoundError("gone"), ObjectNotFoundError, False),
        (obx.PermissionDeniedError("no"), PermissionDeniedError, False),
        (obx.UnauthenticatedError("who"), PermissionDeniedError, False),
        (obx.GenericError("x: " + _BODY_404), ObjectNotFoundError, False),
        (obx.GenericError("non-2xx status code: 403 Forbidden"), PermissionDeniedError, False),
        (obx.GenericError("non-2xx status code: 500 Internal"), TransientStorageError, True),
        (obx.GenericError("non-2xx status code: 503 Slow Down"), TransientStorageError, True),
        (obx.GenericError("non-2xx status code: 429 Too Many"), TransientStorageError, True),
        (obx.GenericError("non-2xx status code: 416 Range"), ReadEOFError, False),
        (obx.GenericError("non-2xx status code: 400 Bad"), StorageError, False),
        (obx.GenericError("non-2xx status code: 501 Not Implemented"), StorageError, False),
        (obx.GenericError("PROPFIND / - non-2xx status code: 501 Not"), StorageError, False),
        (obx.GenericError("error sending request ... TimedOut"), TransientStorageError, True),
        (obx.GenericError("body error ... IncompleteBody"), TransientStorageError, True),
        (obx.GenericError("error sending request"), TransientStorageError, True),
        (obx.GenericError("something else"), StorageError, False),
        (TimeoutError("slow"), TransientStorageError, True),
        (ConnectionResetError("reset"), TransientStorageError, True),
        (ValueError("bad path"), ConfigError, False),
        (RuntimeError("odd"), StorageError, False),
    ],
)
def test_classify_maps_every_error(exc: BaseException, cls: type, transient: bool) -> None:
    err, retry = classify(exc, "s3://b/k, bytes [0, 4)")
    assert type(err) is cls
    assert retry is transient
    assert str(err).startswith("s3://b/k, bytes [0, 4)")
    assert "Debug source" not in str(err)


@pytest.mark.parametrize(
    ("code", "what"),
    [("ContainerNotFound", "container"), ("NoSuchBucket", "bucket"), ("BlobNotFound", "object")],
)
def test_classify_says_whether_the_container_or_the_object_is_missing(code: str, what: str) -> None:
    # The code sits in the body, past what the message keeps of it.
    body = (
        f"non-2xx status code: 404 Not Found: <?xml {'x' * 300}?><Error><Code>{code}</Code></Error>"
    )
    for exc in (obx.NotFoundError(f"not found: {body}"), obx.GenericError(f"x: {body}")):
        err, retry = classify(exc, "az://c/p/k")
        assert type(err) is ObjectNotFoundError and not retry
        assert str(err).startswith(f"az://c/p/k: no such {what} (")


@pytest.mark.parametrize(
    ("status", "code", "message", "cls"),
    [
        (400, "ExpiredToken", "The provided token has expired.", PermissionDeniedError),
        (400, "InvalidAccessKeyId", "The key does not exist.", PermissionDeniedError),
        (
            400,
            "AuthorizationHeaderMalformed",
            "the region &apos;us-east-1&apos; is wrong; expecting &apos;eu-west-3&apos;",
            StorageError,
        ),
        (403, "RequestTimeTooSkewed", "The difference is too large.", PermissionDeniedError),
    ],
)
def test_classify_gives_the_stores_code_and_words(
    status: int, code: str, message: str, cls: type
) -> None:
    # Past the 300 characters a message keeps, as behind a long URL. Before: a 400
    # ExpiredToken was "HTTP 400 (...)", a StorageError, its code cut off.
    body = (
        f"non-2xx status code: {status} Bad: <?xml {'x' * 300}?><Error><Code>{code}</Code>"
        f"<Message>{message}</Message></Error>"
    )
    for exc in (obx.GenericError(f"x: {body}"),) + (
        (obx.PermissionDeniedError(f"denied: {body}"),) if status == 403 else ()
    ):
        err, retry = classify(exc, "s3://b/k")
        assert type(err) is cls and not retry
        words = message.replace("&apos;", "'")
        what = "access denied" if cls is PermissionDeniedError else f"HTTP {status}"
        assert str(err).startswith(f"s3://b/k: {what}: {code}: {words} ("), str(err)


def test_an_archived_object_is_said_to_need_a_restore_not_a_permission() -> None:
    # A GET of an object in S3 Glacier (not restored) is a 403 InvalidObjectState.
    body = (
        "non-2xx status code: 403 Forbidden: <?xml?><Error><Code>InvalidObjectState</Code>"
        "<Message>The operation is not valid for the object's storage class</Message></Error>"
    )
    for exc in (obx.PermissionDeniedError(f"denied: {body}"), obx.GenericError(f"x: {body}")):
        err, retry = classify(exc, "s3://b/k")
        assert type(err) is StorageError and not retry
        assert str(err).startswith("s3://b/k: the object is archived (an S3 Glacier"), str(err)
        assert "restore-object" in str(err) and ": InvalidObjectState: The operation" in str(err)


def test_no_credentials_is_said_so_not_access_denied() -> None:
    # What obstore raises when neither the arguments nor the environment hold credentials
    # and the instance metadata service refuses (measured against moto on a dev machine).
    text = (
        "Generic S3 error: Error performing PUT http://169.254.169.254/latest/api/token in "
        "11ms - Server returned non-2xx status code: 403 Forbidden"
    )
    for exc in (obx.PermissionDeniedError(text), obx.GenericError(text)):
        err, retry = classify(exc, "s3://b/train/")
        assert type(err) is PermissionDeniedError and not retry
        assert str(err).startswith("s3://b/train/: no credentials found")
        assert "AWS_ACCESS_KEY_ID" in str(err)


def test_no_credentials_says_an_aws_profile_is_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: the message listed AWS_PROFILE among the ways to give credentials, to a user
    # whose AWS_PROFILE was set: obstore reads no ~/.aws files.
    text = "Error performing PUT http://169.254.169.254/latest/api/token - 403 Forbidden"
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SHARED_CREDENTIALS_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    plain = str(classify(obx.GenericError(text), "s3://b/k")[0])
    assert "profile" not in plain and "AWS_PROFILE" not in plain
    monkeypatch.setenv("AWS_PROFILE", "research")
    said = str(classify(obx.GenericError(text), "s3://b/k")[0])
    assert "the AWS profile 'research' (AWS_PROFILE) is not read" in said
    assert "aws configure export-credentials --profile research --format env" in said
    monkeypatch.delenv("AWS_PROFILE")
    (tmp_path / ".aws").mkdir()
    (tmp_path / ".aws" / "credentials").write_text("[default]\n")
    said = str(classify(obx.GenericError(text), "s3://b/k")[0])
    assert "the AWS profile 'default' (in ~/.aws) is not read" in said


def test_a_listing_a_plain_http_server_refuses_says_to_name_the_objects() -> None:
    # Python's http.server answers PROPFIND 501, which was retried as a 5xx (5 tries,
    # seconds of back-off) and said only "HTTP 501"; nginx answers 405.
    for status in ("501 Not Implemented", "405 Method Not Allowed"):
        text = f"Error performing PROPFIND http://h/ - non-2xx status code: {status}: <html>"
        err, retry = classify(obx.GenericError(text), "http://h/")
        assert type(err) is StorageError and not retry
        assert "cannot list its files" in str(err) and "a list of their URLs" in str(err)


def test_summarize_trims_debug_dump() -> None:
    text = summarize(obx.GenericError("head line\n\nDebug source:\n" + "x" * 1000))
    assert text == "head line"
    assert len(summarize(obx.GenericError("y" * 1000))) == 300


def _in_thread(fn: Callable[[], object]) -> tuple[threading.Thread, list[BaseException]]:
    """Run ``fn`` on a daemon thread; what it raises lands in the list."""
    errors: list[BaseException] = []

    def body() -> None:
        try:
            fn()
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=body, daemon=True)
    t.start()
    return t, errors


def test_close_during_loop_start_leaves_no_loop_thread(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Fault injection: the first get_many's loop thread is slow to start, and
    # close() lands meanwhile. The loop must not outlive the closed store.
    import headrace.io._objects as objects_mod
    from headrace.io._loop import LoopThread

    entered, go = threading.Event(), threading.Event()
    made: list[LoopThread] = []

    class SlowLoop(LoopThread):
        def __init__(self) -> None:
            entered.set()
            go.wait()
            super().__init__()
            made.append(self)

    monkeypatch.setattr(objects_mod, "LoopThread", SlowLoop)
    store = ObjectStore(root)
    t, errors = _in_thread(lambda: store.get_many(["a.bin"]))
    entered.wait()
    closer = threading.Thread(target=store.close, daemon=True)
    closer.start()
    while not store.closed:
        threading.Event().wait(0.001)
    go.set()
    closer.join(timeout=10)
    t.join(timeout=10)
    assert not t.is_alive() and not closer.is_alive()
    assert len(made) == 1
    made[0]._thread.join(timeout=10)
    assert not made[0].usable, "the store closed but its event loop thread still runs"
    if errors:
        assert isinstance(errors[0], StorageError) and "closed" in str(errors[0])


def test_loop_thread_close_cancels_a_run_in_progress() -> None:
    # A caller blocked in run() when another thread closes the loop must get
    # an error, not wait forever on a task the closed loop dropped.
    import asyncio
    from concurrent.futures import CancelledError

    from headrace.io._loop import LoopThread

    lt = LoopThread()
    started = threading.Event()

    async def forever() -> None:
        started.set()
        await asyncio.Event().wait()

    t, errors = _in_thread(lambda: lt.run(forever()))
    started.wait()
    lt.close()
    t.join(timeout=10)
    assert not t.is_alive(), "run() still waits on a loop that was closed"
    assert len(errors) == 1 and isinstance(errors[0], CancelledError)
    with pytest.raises(RuntimeError):
        lt.run(forever())


def test_cancelled_request_leaves_in_flight_at_zero(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Fault injection: a GET that never answers, cut off by close(); the
    # cancelled attempt must still be counted out of in_flight.
    import asyncio

    import headrace.io._objects as objects_mod

    started = threading.Event()

    async def hang(*args: object, **kwargs: object) -> bytes:
        started.set()
        await asyncio.Event().wait()
        return b""

    monkeypatch.setattr(objects_mod.obs, "get_async", hang)  # a ranged GET
    store = ObjectStore(root)
    t, errors = _in_thread(lambda: store.get_many([("a.bin", 0, 10)]))
    started.wait()
    store.close()
    t.join(timeout=10)
    assert not t.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], StorageError)
    assert "closed" in str(errors[0])
    s = store.stats
    assert (s.in_flight, s.attempts, s.failures, s.cancelled) == (0, 1, 0, 1)


def test_a_store_dropped_without_close_stops_its_loop_thread(root: Path) -> None:
    # As for RequestQueue: a store nobody closed must not leave its event loop running.
    import gc
    import threading
    import time

    def loops() -> int:
        return sum(t.name == "headrace-aio" for t in threading.enumerate())

    before = loops()
    for _ in range(5):
        store = ObjectStore(root)
        assert len(store.get_many(["a.bin"])[0]) == 10_000  # starts its loop thread
        del store
    gc.collect()
    deadline = time.monotonic() + 5
    while loops() > before:
        assert time.monotonic() < deadline, "loop threads outlived their stores"
        time.sleep(0.01)


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (
            ("a.bin", -1, 5),
            r"A byte range needs integer offset >= 0 and length >= 0 \(got offset=-1, length=5\)",
        ),
        (("a.bin", 0, 2.5), r"A byte range needs integer offset >= 0 .*length=2\.5"),
        (
            ("a.bin", 0),
            r"A request is a key or a \(key, offset, length\) tuple \(got \('a\.bin', 0\)\)",
        ),
        (b"a.bin", r"A request is a key or a \(key, offset, length\) tuple \(got b'a\.bin'\)"),
    ],
    ids=["negative-offset", "float-length", "two-tuple", "bytes-key"],
)
def test_a_malformed_request_is_refused_before_any_get(
    root: Path, request_: object, message: str
) -> None:
    with ObjectStore(root) as store:
        with pytest.raises(ConfigError, match=message):
            store.get_many(["a.bin", request_])  # type: ignore[list-item]
        assert store.stats.requests == 0


def test_folder_markers_are_dropped_from_a_listing_empty_objects_kept() -> None:
    from headrace.io._object_info import ObjectInfo, drop_folder_markers

    empty, full = ObjectInfo(0, "e"), ObjectInfo(5, "f")
    listed = [("", empty), ("a", empty), ("a/b", empty), ("a/b/c.bin", full), ("d.bin", empty)]
    # "", "a" and "a/b" are folders of a/b/c.bin: markers; d.bin is an empty object.
    assert drop_folder_markers(listed) == [("a/b/c.bin", full), ("d.bin", empty)]
    assert drop_folder_markers([("p", empty), ("p/x", full)], "p/") == [("p/x", full)]
    assert drop_folder_markers([("a", full), ("a/x", full)]) == [("a", full), ("a/x", full)]


def test_stats_print_their_latencies_summed_up(root: Path) -> None:
    # Printed whole, a long run's 65,536 latencies made a log line of about 1.3 MB.
    with ObjectStore(root) as store:
        assert "latencies_s=<none>" in repr(store.stats)
        store.get_many(["a.bin"] * 40, max_in_flight=4)
        stats = store.stats
    text = repr(stats)
    assert text.startswith("ObjectStats(requests=40, attempts=40, retries=0, failures=0, ")
    assert re.search(r"latencies_s=<40 latest: median [\d.]+ ms, p99 [\d.]+ ms, max [\d.]+ ms>\)$",
                     text), text  # fmt: skip
    stats.latencies_s.extend([0.5] * 70_000)  # a week's worth: the latest 65,536 kept
    text = repr(stats)
    assert len(text) < 400 and "<65,536 latest: median 500.0 ms, p99 500.0 ms, max" in text


def test_a_store_first_used_where_no_thread_may_start_runs_in_the_callers_thread(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Fault injection: Python 3.12 starts no thread in an exit handler ("can't create new
    # thread at interpreter shutdown"); a store first used there (a final checkpoint) must
    # still read, in the caller's thread. Another RuntimeError is not taken for that.
    start = threading.Thread.start
    why = ["can't create new thread at interpreter shutdown"]

    def refused(self: threading.Thread) -> None:
        if self.name == "headrace-aio":
            raise RuntimeError(why[0])
        start(self)

    monkeypatch.setattr(threading.Thread, "start", refused)
    a = (root / "a.bin").read_bytes()
    before = threading.active_count()
    with ObjectStore(root) as store:
        assert bytes(store.get("a.bin")) == a
        got = store.get_many(["sub/b.bin", "a.bin"])
        assert [bytes(g) for g in got] == [(root / "sub" / "b.bin").read_bytes(), a]
        assert threading.active_count() == before  # no loop thread
    why[0] = "can't start new thread"
    with ObjectStore(root) as store, pytest.raises(RuntimeError, match="can't start new thread"):
        store.get("a.bin")


def test_a_store_closed_before_its_loop_starts_leaves_no_coroutine_behind(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Closed by another thread between get_many's own check and its loop's start: the
    # request is refused naming the store, and the coroutine made for it is closed, not
    # left to warn "was never awaited" at some later collection.
    import gc
    import warnings

    store = ObjectStore(root)
    real = store._loop_thread

    def closed_meanwhile() -> object:
        store.close()
        return real()

    monkeypatch.setattr(store, "_loop_thread", closed_meanwhile)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with pytest.raises(StorageError, match=r": store is closed"):
            store.get_many(["a.bin"])
        gc.collect()
    assert not [w for w in seen if "never awaited" in str(w.message)], seen
