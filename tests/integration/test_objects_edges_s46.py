"""S3-compatible servers that answer a ranged GET with other bytes than asked for.

Some S3-compatible servers and proxies ignore ``Range`` (200 and the whole object), and
a cache in between can answer 206 with another ``Content-Range`` than asked, or none.
obstore refuses all three (no wrong byte reaches a caller), but said only "Generic S3
error: Received non-partial response when range requested" or "Requested 100..150, got
101..151": not what the server did, what a ranged read needs, or the way out. A small
S3-speaking server in this process (a thread, no moto) answers in each way.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from s3util import OBJECTS, PREFIX, SMALL, S3Fixture

from headrace.errors import ConfigError, PermissionDeniedError, StorageError, TransientStorageError
from headrace.io import ObjectStore, RetryPolicy

pytestmark = pytest.mark.integration

DATA = bytes(range(256)) * 40  # 10,240 bytes
RETRY = RetryPolicy(attempts=2, base_delay_s=0.01, max_delay_s=0.02)


DENIED = {
    "denied": ("AccessDenied", "Access Denied"),
    "signature": (
        "SignatureDoesNotMatch",
        "The request signature we calculated does not match the signature you provided.",
    ),
}


class _Ranges(BaseHTTPRequestHandler):
    """Answers every GET and HEAD with ``DATA``; a ranged GET as ``mode`` says."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # else a kept connection's answers wait ~40 ms for an ACK
    mode = "ok"
    gets = 0

    def _answer(self, body: bool) -> None:
        if self.mode in DENIED:
            code, words = DENIED[self.mode]
            xml = f"<Error><Code>{code}</Code><Message>{words}</Message></Error>".encode()
            self.send_response(403)
            self.send_header("Content-Length", str(len(xml) if body else 0))
            self.end_headers()
            if body:  # a HEAD's 403 has no body, so no code: S3's too
                self.wfile.write(xml)
            return
        asked = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range") or "")
        data, headers = DATA, {"ETag": '"e1"', "Last-Modified": "Wed, 01 Jan 2025 00:00:00 GMT"}
        if asked is None or self.mode == "whole":
            self.send_response(200)
        else:
            first = int(asked.group(1))
            last = min(int(asked.group(2) or len(DATA) - 1), len(DATA) - 1)
            if self.mode == "shifted":  # a cache answering another request's range
                first, last = first + 1, min(last + 1, len(DATA) - 1)
            data = DATA[first : last + 1]
            self.send_response(206)
            if self.mode != "no_content_range":
                headers["Content-Range"] = f"bytes {first}-{last}/{len(DATA)}"
        headers["Content-Length"] = str(len(data))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        if body:
            self.wfile.write(data)

    def do_GET(self) -> None:
        type(self).gets += 1  # before answering: the client may fail at the headers
        self._answer(True)

    def do_HEAD(self) -> None:
        self._answer(False)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def ranges_store() -> Iterator[ObjectStore]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Ranges)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    store = ObjectStore(
        "s3://bkt/p",
        endpoint=f"http://127.0.0.1:{server.server_address[1]}",
        region="us-east-1",
        access_key_id="k",
        secret_access_key="s",
        path_style=True,
        retry=RETRY,
    )
    try:
        yield store
    finally:
        store.close()
        server.shutdown()
        server.server_close()
        thread.join()


def _read_into(store: ObjectStore) -> bytes:
    out = bytearray(50)
    asyncio.run(store.aread_into("k", 100, out))
    return bytes(out)


READS: dict[str, tuple[Callable[[ObjectStore], object], str]] = {
    "get_range": (lambda s: s.get_range("k", 100, 50), "bytes [100, 150)"),
    "get_first": (lambda s: s.get_first("k", 50)[0], "bytes [0, 50)"),
    "get_many": (lambda s: s.get_many([("k", 100, 50)])[0], "bytes [100, 150)"),
    "get_ranges": (lambda s: s.get_ranges("k", [(100, 50), (5000, 10)])[0], "[100, 5010)"),
    "aread_into": (_read_into, "bytes [100, 150)"),
}

# What each mode's message must say the server did.
SAID = {
    "whole": "does not serve byte ranges (it answered a Range request with 200 and the whole",
    "shifted": ") (206 Partial Content) for bytes [",
    "no_content_range": "206 Partial Content without a Content-Range header",
}


@pytest.fixture
def mode() -> Iterator[Callable[[str], None]]:
    def set_mode(name: str) -> None:
        _Ranges.mode = name

    yield set_mode
    _Ranges.mode = "ok"


@pytest.mark.parametrize("call", list(READS))
def test_the_fake_server_serves_ranges_when_it_honours_them(
    ranges_store: ObjectStore, call: str
) -> None:
    got = bytes(READS[call][0](ranges_store))  # type: ignore[call-overload]
    assert got == (DATA[:50] if call == "get_first" else DATA[100:150])


@pytest.mark.parametrize("how", list(SAID))
@pytest.mark.parametrize("call", list(READS))
def test_a_range_answered_with_other_bytes_is_refused_saying_what_came_and_the_fix(
    ranges_store: ObjectStore, mode: Callable[[str], None], how: str, call: str
) -> None:
    read, named = READS[call]
    mode(how)
    before = _Ranges.gets
    with pytest.raises(StorageError) as caught:
        read(ranges_store)
    msg = str(caught.value)
    assert not isinstance(caught.value, TransientStorageError), msg  # same answer every time
    assert _Ranges.gets - before == 1, msg  # not retried
    assert msg.startswith("s3://bkt/p/k") and named in msg, msg
    assert SAID[how] in msg, msg
    assert "Generic S3 error" not in msg.split(" (")[0], msg
    assert "206 Partial Content" in msg and "whole-object reads" in msg, msg


def test_whole_object_reads_work_from_a_server_that_ignores_range(
    ranges_store: ObjectStore, mode: Callable[[str], None]
) -> None:
    mode("whole")
    assert bytes(ranges_store.get("k")) == DATA
    assert bytes(ranges_store.get_many(["k"])[0]) == DATA


@pytest.mark.parametrize("how", list(DENIED))
@pytest.mark.parametrize("call", ["get", "stat", "get_range"])
def test_a_403_from_s3_says_what_to_check(
    ranges_store: ObjectStore, mode: Callable[[str], None], how: str, call: str
) -> None:
    """S3 answers 403 AccessDenied, not 404, for a key that does not exist when the
    credentials may not list the bucket (s3:ListBucket), and a HEAD's 403 carries no code:
    "access denied" alone sent users to their credentials for a mistyped key."""
    mode(how)
    read = {
        "get": lambda: ranges_store.get("k"),
        "stat": lambda: ranges_store.stat("k"),
        "get_range": lambda: ranges_store.get_range("k", 0, 10),
    }[call]
    with pytest.raises(PermissionDeniedError) as caught:
        read()
    msg = str(caught.value)
    assert msg.startswith("s3://bkt/p/k") and "access denied" in msg, msg
    if how == "signature" and call != "stat":
        assert "secret_access_key does not belong to access_key_id" in msg, msg
    else:
        assert "for a key that does not exist" in msg and "s3:ListBucket" in msg, msg
        assert "AWS_ACCESS_KEY_ID" in msg, msg


@pytest.mark.parametrize("tail", ["/headrace-test", "/headrace-test/"])
def test_an_endpoint_that_ends_with_the_bucket_is_refused_not_read_as_a_missing_object(
    s3: S3Fixture, tail: str
) -> None:
    """Cloudflare R2's dashboard shows its S3 API as ``https://ACCOUNT.r2.cloudflarestorage
    .com/BUCKET``; given as the endpoint, path-style requests put the bucket after it once
    more, ``/headrace-test/headrace-test/data/...``: every object was "no such object"."""
    opts = {**s3.options(), "endpoint": s3.server.info.endpoint + tail}
    with pytest.raises(ConfigError) as caught:
        ObjectStore(s3.url, **opts)  # type: ignore[arg-type]
    msg = str(caught.value)
    assert msg.startswith(f"{s3.url}: endpoint {s3.server.info.endpoint + tail!r}"), msg
    assert f"/headrace-test/headrace-test/{PREFIX}/" in msg, msg
    assert f"give the endpoint without it ({s3.server.info.endpoint})" in msg, msg
    # The endpoint as meant reads the object.
    with ObjectStore(s3.url, **s3.options()) as store:  # type: ignore[arg-type]
        assert len(bytes(store.get(SMALL[0]))) == OBJECTS[SMALL[0]]


def test_an_endpoint_with_another_path_is_taken_as_given(s3: S3Fixture) -> None:
    # A gateway that serves S3 under a path of its own (http://gw/s3) is not refused: only
    # the bucket's own name as the path's last segment says the bucket was given twice.
    opts = {**s3.options(), "endpoint": s3.server.info.endpoint + "/s3"}
    ObjectStore(s3.url, **opts).close()  # type: ignore[arg-type]
