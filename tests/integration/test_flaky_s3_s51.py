"""Training through an S3 that misbehaves (moto behind the fault proxy): a whole-object
GET answered with a consistently short body is retried as a body cut short (backed off,
counted, with the policy's attempts), and a request that gives up on a 5xx says what to
do (a more patient policy; resume the loader from its state), which gives the batches of
a run without the outage."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from s3util import BUCKET, S3Fixture, StoreFactory, upload_token_file
from s3util import store_options as options

from headrace.emulate import FaultRule, LatencyProxy
from headrace.errors import TransientStorageError
from headrace.formats import FileSource, TokenSource
from headrace.pipeline import Loader
from headrace.testing import update_digest

pytestmark = pytest.mark.integration

PREFIX = "flaky51"


def _digest(src: FileSource) -> str:
    h = hashlib.sha256()
    with Loader(src, batch_size=4, seed=1, steps=6) as loader:
        for batch in loader:
            update_digest(h, batch)
    return h.hexdigest()


def test_a_file_source_reads_an_object_sent_short_three_times_as_listed(
    s3: S3Fixture, proxy: LatencyProxy, tmp_path: Path
) -> None:
    """Three GETs of one NPY file answered with half its bytes (a Content-Length that
    agrees): until 2026-12-07 the file source asked three times at once, without a
    backoff or a count in the store's retries, then failed the run with "truncated or
    changed object"; now each is a try of the store's policy (FAST_RETRY: 4)."""
    client = s3.server.info.boto3_client()
    rng = np.random.default_rng(51)
    for i in range(6):
        np.save(tmp_path / f"{i}.npy", rng.standard_normal((8, 4)).astype(np.float32))
        client.put_object(
            Bucket=BUCKET, Key=f"{PREFIX}/npy/{i}.npy", Body=(tmp_path / f"{i}.npy").read_bytes()
        )
    local = _digest(FileSource(tmp_path, format="npy"))
    proxy.set_faults([FaultRule(kind="short", match=f"GET /{BUCKET}/{PREFIX}/npy/3.npy", limit=3)])
    src = FileSource(
        f"s3://{BUCKET}/{PREFIX}/npy/", format="npy", store_options=options(s3, proxy.endpoint)
    )
    assert _digest(src) == local
    assert proxy.stats.faults == 3
    stats = src.object_stats  # as token, row and table sources say theirs
    assert stats is not None and stats.retries == 3
    assert FileSource(tmp_path, format="npy").object_stats is None  # local: none


def test_a_read_that_gives_up_on_5xx_says_what_to_do(
    proxy: LatencyProxy, open_store: StoreFactory
) -> None:
    proxy.set_faults([FaultRule(kind="status", status=500)])
    store = open_store(proxy.endpoint)
    with pytest.raises(TransientStorageError) as caught:
        store.get_range("big.bin", 100, 50)
    message = str(caught.value)
    assert f"s3://{BUCKET}/data/big.bin, bytes [100, 150): HTTP 500" in message, message
    assert "gave up after 4 attempts" in message, message
    assert 'store_options={"retry": RetryPolicy(attempts=8' in message, message
    assert "state_dict()" in message, message


def test_a_loader_that_gave_up_during_an_outage_resumes_to_the_fault_free_batches(
    s3: S3Fixture, proxy: LatencyProxy, tmp_path: Path
) -> None:
    """Every GET answered 500 from step 3 on (an outage): the loader gives up naming the
    range; resumed from its last state once the store answers, the run reads on as a run
    without the outage did."""
    upload_token_file(s3, tmp_path, f"{PREFIX}/tok", 40_000, seed=51)
    url = f"s3://{BUCKET}/{PREFIX}/tok/tok.bin"
    kw: dict[str, Any] = {"context": 32, "window_bytes": 8192, "block_bytes": 4096}
    opts = options(s3, proxy.endpoint)

    def hashes(loader: Loader) -> Iterator[str]:
        for batch in loader:
            h = hashlib.sha256()
            update_digest(h, batch)
            yield h.hexdigest()

    with Loader(TokenSource(url, **kw, store_options=opts), batch_size=4, steps=40) as clean:
        want = list(hashes(clean))
    src = TokenSource(url, **kw, store_options=opts)
    got: list[str] = []
    with Loader(src, batch_size=4, steps=40) as loader:
        with pytest.raises(TransientStorageError, match=r"tok\.bin, bytes \[\d+, \d+\): HTTP 500"):
            for digest in hashes(loader):
                got.append(digest)
                state = loader.state_dict()
                if len(got) == 3:
                    proxy.set_faults([FaultRule(kind="status", status=500)])
    proxy.set_faults([])
    with Loader(src, batch_size=4, steps=40) as resumed:
        resumed.load_state_dict(state)
        got += hashes(resumed)
    assert got == want
