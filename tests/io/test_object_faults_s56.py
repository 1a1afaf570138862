"""An ML engineer's run on S3 (moto on 127.0.0.1, behind headrace's fault proxy) when the
store goes wrong mid-run: the session's temporary credentials run out, and the store
stops answering while a Parquet table's next row groups are being read ahead. Faults are
injected by the proxy only; every batch delivered before is compared with pyarrow's
reading of the same rows."""

from __future__ import annotations

import http.server
import io
import logging
import re
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from _http import serving
from _tries import gave_up_tried_once
from headrace.errors import PermissionDeniedError, StorageError, TransientStorageError
from headrace.formats import FileSource, TableSource, TokenSource
from headrace.io import ObjectStore, RetryPolicy
from headrace.pipeline import Loader

BUCKET = "faults-s56"
ROWS, GROUP = 400, 20  # 20 row groups; windows of 2 groups
TOKENS = 40_000


@pytest.fixture(scope="module")
def s3() -> Iterator[Any]:
    pytest.importorskip("moto")
    from headrace.emulate import LatencyProxy, LocalS3

    rng = np.random.default_rng(56)
    table = pa.table({"id": np.arange(ROWS), "x": rng.standard_normal(ROWS)})
    body = io.BytesIO()
    pq.write_table(table, body, row_group_size=GROUP)
    with LocalS3() as server, LatencyProxy(server.info.endpoint) as proxy:
        server.create_bucket(BUCKET)
        client = server.info.boto3_client()
        client.put_object(Bucket=BUCKET, Key="t/part-0.parquet", Body=body.getvalue())
        tokens = rng.integers(0, 50_000, TOKENS, np.uint16).tobytes()
        client.put_object(Bucket=BUCKET, Key="tok/train.bin", Body=tokens)
        yield server, proxy, table


def _options(s3: Any, retry: RetryPolicy) -> dict[str, Any]:
    server, proxy, _ = s3
    return {**server.info.store_options(), "endpoint": proxy.endpoint, "retry": retry}


def test_credentials_expiring_mid_run_say_what_to_do(s3: Any) -> None:
    from headrace.emulate._proxy_faults import FaultRule

    _, proxy, _ = s3
    proxy.set_faults([])
    retry = RetryPolicy(attempts=3, base_delay_s=0.01, max_delay_s=0.05, timeout_s=5.0)
    # 16 KiB windows of 4 KiB blocks: GETs go on through the run.
    src = TokenSource(
        f"s3://{BUCKET}/tok/train.bin",
        context=64,
        window_bytes=16384,
        block_bytes=4096,
        store_options=_options(s3, retry),
    )
    seen = 0
    try:
        with (
            pytest.raises(PermissionDeniedError) as info,
            Loader(src, batch_size=4, seed=0, steps=200, prefetch=2) as loader,
        ):
            for seen, _ in enumerate(loader, 1):
                if seen == 2:  # AWS answers a session's expired token with 400 ExpiredToken
                    proxy.set_faults([FaultRule(kind="status", status=400, match="GET")])
    finally:
        proxy.set_faults([])
        src.close()
    text = str(info.value)
    assert seen >= 2
    assert re.match(rf"s3://{BUCKET}/tok/train\.bin, bytes \[\d+, \d+\): access denied: ", text)
    assert "ExpiredToken: The provided token has expired." in text
    # What to do: until 2026-12-07 the message ended with obstore's words; a user with
    # keys from `aws configure export-credentials` (or SSO) was not told that they are
    # never renewed, nor how to go on.
    assert "never renewed" in text, text
    assert "state_dict()" in text, text
    assert "AWS_WEB_IDENTITY_TOKEN_FILE" in text, text


def test_a_read_ahead_the_batch_waited_on_is_not_fetched_again(
    s3: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # The store stops answering (500 to every GET) while the next window's row groups are
    # read ahead; the batch that needs them waits on that read-ahead. Until 2026-12-07,
    # when it gave up, the batch fetched the groups once more with the whole retry policy
    # again: twice the policy's time before the error (a stalled store: 2 x 5 tries of
    # timeout_s=30), and every try said twice. A read-ahead that had already failed
    # before a batch came to it (long ago, or under a closed store) is still tried again.
    from headrace.emulate._proxy_faults import FaultRule

    _, proxy, table = s3
    proxy.set_faults([])
    # Waits long (1 s) against a batch's decode (ms), so the read-ahead is in flight when the
    # batch that needs it asks; attempts are not spent by throttling (a 500).
    retry = RetryPolicy(attempts=3, base_delay_s=1.0, max_delay_s=1.0, timeout_s=5.0)
    src = TableSource(
        f"s3://{BUCKET}/t",
        window_rows=2 * GROUP,
        shuffle="none",
        store_options=_options(s3, retry),
    )
    want = table.column("id").to_numpy()
    got: list[np.ndarray] = []
    try:
        with (
            caplog.at_level(logging.WARNING, logger="headrace"),
            pytest.raises(TransientStorageError) as info,
            Loader(src, batch_size=10, seed=0, steps=40, prefetch=1) as loader,
        ):
            for batch in loader:
                got.append(np.asarray(batch["id"]))
                if len(got) == 2:
                    proxy.set_faults([FaultRule(kind="status", status=500, match="GET")])
    finally:
        proxy.set_faults([])
        src.close()
    assert got and np.array_equal(np.concatenate(got), want[: 10 * len(got)])
    gave_up_tried_once(str(info.value), rf"s3://{BUCKET}/t/part-0\.parquet", caplog)


# What AWS answers a request signed for another region than the bucket's (a bucket in
# eu-west-3, the store's region us-east-1, as obstore defaults to without AWS_REGION).
_REDIRECT = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>PermanentRedirect</Code><Message>'
    b"The bucket you are attempting to access must be addressed using the specified "
    b"endpoint. Please send all future requests to this endpoint.</Message><Endpoint>"
    b"bkt.s3.eu-west-3.amazonaws.com</Endpoint><Bucket>bkt</Bucket></Error>"
)


class _OtherRegion(http.server.BaseHTTPRequestHandler):
    def _answer(self, body: bytes) -> None:
        self.send_response(301)
        self.send_header("x-amz-bucket-region", "eu-west-3")
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self._answer(_REDIRECT)

    def do_HEAD(self) -> None:
        self._answer(b"")

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.mark.parametrize("request_kind", ["list", "ranged GET", "HEAD"])
def test_a_bucket_in_another_region_says_to_set_the_region(request_kind: str) -> None:
    # A mock server for the fault (moto serves every region). Until 2026-12-07 the error
    # was obstore's words behind "GenericError:" ("Received redirect without LOCATION,
    # this normally indicates an incorrectly configured region"), not how to set it.
    with serving(_OtherRegion) as endpoint:
        options: dict[str, Any] = {
            "endpoint": endpoint.rstrip("/"),
            "region": "us-east-1",
            "access_key_id": "AKIDEXAMPLE",
            "secret_access_key": "secret",
            "path_style": True,
            "retry": RetryPolicy(attempts=2, base_delay_s=0.01, max_delay_s=0.01),
        }
        with pytest.raises(StorageError) as info:
            if request_kind == "list":
                FileSource("s3://bkt/train", format="npy", store_options=options)
            elif request_kind == "ranged GET":
                TokenSource("s3://bkt/train/x.bin", context=8, store_options=options)
            else:
                with ObjectStore("s3://bkt/train", **options) as store:
                    store.stat("x.bin")
    text = str(info.value)
    assert type(info.value) is StorageError, text  # not retried: every try is redirected
    assert text.startswith("s3://bkt/train/"), text
    assert "GenericError" not in text, text
    assert "another region than the store's" in text, text
    assert "store_options={'region': " in text, text
    assert "get-bucket-location --bucket bkt" in text, text
