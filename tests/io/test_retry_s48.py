"""Retry policies at their edges: many tries, delays and timeouts that are no number of seconds."""

from __future__ import annotations

import http.server
import logging
import random
import re
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from _http import serving
from headrace.errors import ConfigError, TransientStorageError
from headrace.io._object_tries import Tries
from headrace.io._objects import ObjectStore
from headrace.io._retry import RetryPolicy

_WHERE = "s3://b/k.bin, bytes [0, 8)"


def test_a_request_retried_past_1024_tries_still_backs_off() -> None:
    # The n-th retry's wait is base * 2**(n-1), capped: 2.0**1024 overflowed a float, so
    # the 1025th retry raised OverflowError from delay_s instead of waiting, whatever
    # the cap. Zero delays reach it in a few thousand fast failures (a refused port
    # under connect_retry_s, a store that throttles under a large attempts).
    policy = RetryPolicy(attempts=1100, base_delay_s=0.0, max_delay_s=0.0)
    assert policy.delay_s(5000, random.Random(0)) == 0.0
    assert RetryPolicy(max_delay_s=2.0).delay_s(5000, random.Random(0)) <= 2.0
    failures = 1090
    calls = 0

    def once() -> bytes:
        nonlocal calls
        calls += 1
        if calls <= failures:
            raise ConnectionResetError(104, "Connection reset by peer")
        return b"12345678"

    tries = Tries(policy)
    logging.getLogger("headrace").disabled = True
    try:
        assert tries.run(_WHERE, once, len) == b"12345678"
    finally:
        logging.getLogger("headrace").disabled = False
    stats = tries.stats()
    assert (stats.retries, stats.requests, stats.bytes) == (failures, 1, 8)


def test_the_last_of_many_tries_names_the_url_and_the_count() -> None:
    def once() -> bytes:
        raise ConnectionResetError(104, "Connection reset by peer")

    policy = RetryPolicy(attempts=1030, base_delay_s=0.0, max_delay_s=0.0, connect_retry_s=0.0)
    tries = Tries(policy)
    logging.getLogger("headrace").disabled = True
    try:
        with pytest.raises(TransientStorageError, match=r"k\.bin, bytes \[0, 8\).*after 1030 at"):
            tries.run(_WHERE, once, len)
    finally:
        logging.getLogger("headrace").disabled = False


@pytest.mark.parametrize("field", ["base_delay_s", "max_delay_s"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), 1e300])
def test_a_delay_that_is_no_number_of_seconds_is_refused(field: str, bad: float) -> None:
    # NaN passed the "< 0" check, then time.sleep(nan) raised ValueError at the first
    # retry; inf (or 1e300) raised OverflowError from time.sleep.
    with pytest.raises(ConfigError, match=re.escape(f"{field}={bad}")):
        RetryPolicy(**{field: bad})  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), 1e20])
def test_a_timeout_that_is_no_number_of_seconds_is_refused(bad: float) -> None:
    # Accepted, then opening any store raised ValueError ("cannot convert float NaN to
    # integer") or OverflowError from datetime.timedelta, naming neither the policy nor
    # the field.
    with pytest.raises(
        ConfigError, match=re.escape(f"timeout_s must be > 0 and at most 1e+09 seconds (got {bad})")
    ):
        RetryPolicy(timeout_s=bad)


def test_large_but_finite_waits_are_taken() -> None:
    # A day's timeout and an hour's cap are what some jobs want: not refused.
    policy = RetryPolicy(timeout_s=86400.0, max_delay_s=3600.0, base_delay_s=60.0)
    assert 1800.0 <= policy.delay_s(100, random.Random(0)) < 3600.0


@pytest.mark.parametrize("bad", [True, False])
def test_attempts_is_a_count_not_a_flag(bad: bool) -> None:
    with pytest.raises(ConfigError, match="attempts must be an integer"):
        RetryPolicy(attempts=bad)


class _SlowDown(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_error(503, "Slow Down")

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def slow_down() -> Iterator[str]:
    """The URL of an HTTP server that answers every GET 503 Slow Down."""
    with serving(_SlowDown) as url:
        yield url


def _given_up(url: str, policy: RetryPolicy) -> str:
    logging.getLogger("headrace").disabled = True
    try:
        with (
            ObjectStore(url, allow_http=True, retry=policy) as store,
            pytest.raises(TransientStorageError, match="HTTP 503") as info,
        ):
            store.get("x.bin")
    finally:
        logging.getLogger("headrace").disabled = False
    return str(info.value)


def test_a_store_throttling_without_adapt_in_flight_is_said_as_it_happened(
    slow_down: str,
) -> None:
    # With adapt_in_flight=False no throttle is free: the message said "4 x attempts
    # throttled tries" were made, and its RetryPolicy to paste dropped adapt_in_flight
    # (and any other field given), and asked for max_delay_s=0 "to wait longer".
    policy = RetryPolicy(attempts=2, base_delay_s=0.0, max_delay_s=0.0, adapt_in_flight=False)
    said = _given_up(slow_down, policy)
    assert "gave up after 2 attempts in" in said
    assert "4 x attempts" not in said
    assert "adapt_in_flight=False: every throttled try is an attempt" in said
    suggested = said.rsplit('store_options={"retry": ', 1)[1].removesuffix("})")
    again = eval(suggested, {"RetryPolicy": RetryPolicy})  # the code the message offers
    assert again == RetryPolicy(
        attempts=4, base_delay_s=0.05, max_delay_s=2.0, adapt_in_flight=False
    )


def test_a_store_throttling_past_the_free_tries_offers_a_longer_policy(slow_down: str) -> None:
    # The policy offered dropped the timeout_s given: pasted, it changed more than the waits.
    policy = RetryPolicy(attempts=2, base_delay_s=0.001, max_delay_s=0.002, timeout_s=7.0)
    said = _given_up(slow_down, policy)
    assert "gave up after 2 attempts, 8 throttled tries in" in said
    assert "(4 x attempts throttled tries, each up to max_delay_s apart)" in said
    suggested = said.rsplit('store_options={"retry": ', 1)[1].removesuffix("})")
    again = eval(suggested, {"RetryPolicy": RetryPolicy})
    assert again == RetryPolicy(attempts=4, max_delay_s=0.004, timeout_s=7.0)


_FORKED_JITTER = """
import logging, os, sys
from headrace.io._object_tries import Tries
from headrace.io._retry import RetryPolicy

logging.getLogger("headrace").disabled = True
tries = Tries(RetryPolicy(base_delay_s=0.0, max_delay_s=0.0))


def once():
    if not failed:
        failed.append(1)
        raise ConnectionResetError(104, "Connection reset by peer")
    return b"x"


for _ in range(3):
    r, w = os.pipe()
    if os.fork() == 0:
        failed = []
        tries.run("s3://b/k", once, len)
        os.write(w, repr(tries._rng.random()).encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as fh:
        print(fh.read())
    os.wait()
"""


def test_workers_forked_from_one_store_jitter_apart() -> None:
    # The jitter's generator was copied by fork: workers forked from a process that had
    # made a store (before its first request, as they must) waited the same times, and
    # after a failure shared by all, retried together: what the jitter is for.
    out = subprocess.run(
        [sys.executable, "-c", _FORKED_JITTER], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    drawn = out.stdout.split()
    assert len(drawn) == 3 and len(set(drawn)) == 3, drawn


class _Stalls(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.server.stalled.wait(5.0)  # type: ignore[attr-defined]

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_tries_that_time_out_name_the_timeout_and_how_to_raise_it() -> None:
    # "timed out (... error sending request) (gave up after 2 attempts in 0.4 s)" said
    # neither that every try is cut at timeout_s, connect and transfer together, nor
    # how to give one longer: a large object on a slow link failed every try alike.
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Stalls)
    server.daemon_threads = True
    server.stalled = threading.Event()  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    policy = RetryPolicy(attempts=2, timeout_s=0.2, base_delay_s=0.0, max_delay_s=0.0)
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    logging.getLogger("headrace").disabled = True
    try:
        with ObjectStore(url, allow_http=True, retry=policy) as store:
            with pytest.raises(TransientStorageError) as info:
                store.get_many([("x.bin", 5, 10)])
    finally:
        logging.getLogger("headrace").disabled = False
        server.stalled.set()  # type: ignore[attr-defined]
        server.shutdown()
        server.server_close()
        thread.join()
    said = str(info.value)
    assert said.startswith(f"{url}x.bin, bytes [5, 15): timed out"), said
    assert "gave up after 2 attempts in" in said
    assert "each try is cut at timeout_s=0.2 s" in said
    suggested = said.rsplit('store_options={"retry": ', 1)[1].removesuffix("})")
    again = eval(suggested, {"RetryPolicy": RetryPolicy})  # the code the message offers
    assert again == RetryPolicy(attempts=2, timeout_s=0.8, base_delay_s=0.0, max_delay_s=0.0)
