"""What an ML engineer's log says when the S3 store (moto on 127.0.0.1, behind headrace's
fault proxy) drops every connection for a while mid-run: every request in flight fails
to connect, and each is retried by time (``RetryPolicy.connect_retry_s``). Until
2026-12-07 each try of each request was a warning (1,671 lines in 50 s of faults); now
the spell is said in a bounded number of lines naming the URL, the error, the try count
and how it ended, each try at DEBUG. Faults are injected by the proxy only; the batches
are compared with numpy's reading of the same bytes."""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from headrace.errors import TransientStorageError
from headrace.formats import TokenSource
from headrace.io import RetryPolicy
from headrace.pipeline import Loader

BUCKET = "retry-log-s56"
TOKENS = 40_000
URL = f"s3://{BUCKET}/tok/train.bin"


@pytest.fixture(scope="module")
def s3() -> Iterator[Any]:
    pytest.importorskip("moto")
    from headrace.emulate import LatencyProxy, LocalS3

    tokens = np.random.default_rng(56).integers(0, 50_000, TOKENS, np.uint16)
    with LocalS3() as server, LatencyProxy(server.info.endpoint) as proxy:
        server.create_bucket(BUCKET)
        server.info.boto3_client().put_object(
            Bucket=BUCKET, Key="tok/train.bin", Body=tokens.tobytes()
        )
        yield server, proxy, tokens


def _run(
    s3: Any, caplog: pytest.LogCaptureFixture, retry: RetryPolicy, drop_s: float
) -> tuple[list[str], list[str], int, BaseException | None]:
    """A run whose GETs are dropped from its second batch on for ``drop_s`` seconds: the
    warnings and DEBUG lines of the retries, the batches checked, and its error."""
    from headrace.emulate._proxy_faults import FaultRule

    server, proxy, tokens = s3
    proxy.set_faults([])
    options = {**server.info.store_options(), "endpoint": proxy.endpoint, "retry": retry}
    # 16 KiB windows of 4 KiB blocks: several GETs in flight through the run.
    src = TokenSource(URL, context=64, window_bytes=16384, block_bytes=4096, store_options=options)
    timer = threading.Timer(drop_s, proxy.set_faults, ([],))
    seen, error = 0, None
    try:
        with (
            caplog.at_level(logging.DEBUG, logger="headrace"),
            Loader(src, batch_size=4, seed=0, steps=150, prefetch=2) as loader,
        ):
            for batch in loader:
                seen += 1
                for x, y in zip(np.asarray(batch["x"]), np.asarray(batch["y"]), strict=True):
                    row = np.append(x, y[-1])  # a window of 65 tokens of the file
                    at = np.flatnonzero(tokens[: TOKENS - 64] == row[0])
                    assert any(np.array_equal(tokens[a : a + 65], row) for a in at)
                if seen == 2:
                    proxy.set_faults([FaultRule(kind="drop", match="GET")])
                    timer.start()
    except TransientStorageError as exc:
        error = exc
    finally:
        timer.cancel()
        proxy.set_faults([])
        src.close()
    records = [r for r in caplog.records if r.name == "headrace" and "try " in r.getMessage()]
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    debug = [r.getMessage() for r in records if r.levelno == logging.DEBUG]
    return said, debug, seen, error


def test_connections_dropped_for_seconds_are_said_in_a_few_lines(
    s3: Any, caplog: pytest.LogCaptureFixture
) -> None:
    retry = RetryPolicy(attempts=3, base_delay_s=0.05, max_delay_s=0.3, timeout_s=5.0)
    said, debug, seen, error = _run(s3, caplog, retry, drop_s=3.0)
    assert error is None and seen == 150
    assert len(said) <= 3, (len(said), said[:4])
    # Each request's tries, one by one, only at DEBUG: before, each was a warning.
    assert len(debug) >= 10, debug
    first = said[0]
    assert re.match(rf"headrace: {re.escape(URL)}, bytes \[\d+, \d+\): connection failed ", first)
    assert "; try 1 of 3 failed after " in first, first
    assert "said at most every 10 s while they last" in first, first
    end = said[-1]
    m = re.match(
        rf"headrace: {re.escape(URL)}, bytes \[\d+, \d+\): connected again, on try (\d+) after "
        r"\d+\.\d s; since the last line, (\d+) more tries of (\d+) requests failed to connect$",
        end,
    )
    assert m is not None, said
    assert int(m.group(1)) > 3  # retried by time, past the attempts
    assert int(m.group(2)) >= int(m.group(3)) >= 1


def test_connections_dropped_until_the_requests_give_up_end_with_the_error(
    s3: Any, caplog: pytest.LogCaptureFixture
) -> None:
    retry = RetryPolicy(
        attempts=3, base_delay_s=0.05, max_delay_s=0.3, timeout_s=5.0, connect_retry_s=2.0
    )
    said, debug, seen, error = _run(s3, caplog, retry, drop_s=60.0)
    assert error is not None and seen >= 2
    assert len(said) <= 3, (len(said), said[:4])
    assert len(debug) >= 10, debug
    assert "; try 1 of 3 failed after " in said[0], said
    end = said[-1]
    assert re.match(
        rf"headrace: {re.escape(URL)}, bytes \[\d+, \d+\): connection failed .*\(gave up after "
        r"\d+ attempts in \d+\.\d s: connection failures are retried for up to "
        r"connect_retry_s=2 s\); since the last line, \d+ more tries of \d+ requests failed "
        "to connect$",
        end,
    ), said
