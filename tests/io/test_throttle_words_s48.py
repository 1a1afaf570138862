"""A key or URL that holds a throttle's word ("slowdown", "throttl"...) is no throttle; one
that holds a timeout's ("timedout") makes no timeout."""

from __future__ import annotations

import http.server
import logging
import socket
from collections.abc import Iterator

import obstore.exceptions as obx
import pytest

from _http import serving
from headrace.errors import ObjectNotFoundError, TransientStorageError
from headrace.io._objects import ObjectStore
from headrace.io._retry import RetryPolicy, classify, is_connection_failure, is_throttle


class _ByName(http.server.BaseHTTPRequestHandler):
    """Answers a GET of ``.../<status>.bin`` with that status."""

    def do_GET(self) -> None:
        self.send_error(int(self.path.rsplit("/", 1)[1].split(".")[0]))

    do_HEAD = do_GET

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    with serving(_ByName) as url:
        yield url


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    logging.getLogger("headrace").disabled = True
    yield
    logging.getLogger("headrace").disabled = False


_POLICY = RetryPolicy(attempts=2, base_delay_s=0.0, max_delay_s=0.0)


@pytest.mark.parametrize("prefix", ["slowdown", "throttled-logs", "ServerBusy", "TooManyRequests"])
def test_a_500_under_such_a_key_uses_attempts_and_leaves_the_limit_alone(
    server: str, prefix: str
) -> None:
    # is_throttle() looked for its words in obstore's whole message, which holds the
    # URL: every failure under such a key was a throttle, retried 4 x attempts times
    # as "the store throttled", halving the store's in-flight limit for every read.
    with ObjectStore(server + prefix, allow_http=True, retry=_POLICY) as store:
        with pytest.raises(TransientStorageError, match=r"HTTP 500 .*gave up after 2 attempts in"):
            store.get("500.bin")
        stats = store.stats
    assert (stats.attempts, stats.throttled, stats.in_flight_limit) == (2, 0, None)


def test_a_missing_object_under_such_a_key_is_no_throttle(server: str) -> None:
    with ObjectStore(server + "slowdown", allow_http=True, retry=_POLICY) as store:
        with pytest.raises(ObjectNotFoundError, match=r"slowdown/404\.bin"):
            store.get("404.bin")
        with pytest.raises(ObjectNotFoundError, match=r"slowdown/404\.bin"):
            store.get_many([("404.bin", 0, 4)])
        stats = store.stats
    assert (stats.throttled, stats.in_flight_limit) == (0, None)


def test_a_503_under_any_key_is_a_throttle(server: str) -> None:
    with ObjectStore(server + "plain", allow_http=True, retry=_POLICY) as store:
        with pytest.raises(TransientStorageError, match="8 throttled tries"):
            store.get("503.bin")
        assert store.stats.throttled == 10


@pytest.mark.parametrize(
    ("text", "throttle"),
    [
        (
            "Generic HTTP error: Error performing GET http://h:9/throttle/x.bin in 1ms - "
            "HTTP error: error sending request",
            False,
        ),
        ("Object at location slowdown/x.bin not found: No Body", False),
        ('Generic error: odd\n\nDebug source:\nGeneric { path: "slowdown/x.bin" }', False),
        ("HTTP error: error sending request for url (https://h/b/slowdown/x.bin)", False),
        (
            "Server returned non-2xx status code: 404 Not Found: <Error><Code>NoSuchKey</Code>"
            "<Key>slowdown/x.bin</Key></Error>",
            False,
        ),
        (
            "Server returned non-2xx status code: 400 Bad Request: <Error><Code>SlowDown"
            "</Code><Message>Please reduce your request rate.</Message></Error>",
            True,
        ),
        ("Error performing GET http://h/throttled/x.bin - The server is busy (ServerBusy)", True),
    ],
)
def test_which_failures_are_throttles(text: str, throttle: bool) -> None:
    assert is_throttle(obx.GenericError(text)) is throttle


def _refusing_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_refused_connection_under_a_key_saying_timedout_is_a_connection_failure() -> None:
    # The timeout's words were looked for in the URL too: a refused connection to a key
    # under timedout/ was "timed out", given up after the attempts, not retried for
    # connect_retry_s as every other refused connection is.
    policy = RetryPolicy(attempts=1, base_delay_s=0.01, max_delay_s=0.01, connect_retry_s=0.2)
    url = f"http://127.0.0.1:{_refusing_port()}/timedout"
    with ObjectStore(url, allow_http=True, retry=policy) as store:
        with pytest.raises(TransientStorageError) as info:
            store.get("x.bin")
        attempts = store.stats.attempts
    said = str(info.value)
    assert "timedout/x.bin: connection failed" in said, said
    assert "connect_retry_s=0.2 s" in said and attempts > 1


@pytest.mark.parametrize(
    "text",
    [
        "Generic HTTP error: Error performing GET http://h:9/timedout/x.bin in 1ms - HTTP "
        "error: error sending request",
        "HTTP error: error sending request for url (https://h/b/unexpectedeof/x.bin)",
    ],
)
def test_words_in_a_url_do_not_make_a_connection_failure_something_else(text: str) -> None:
    err, transient = classify(obx.GenericError(text), "s3://b/k")
    assert "connection failed" in str(err) and transient
    assert is_connection_failure(obx.GenericError(text))
