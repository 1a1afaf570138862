"""A bench workload's ``[reader] request_timeout_s`` / ``request_attempts`` reach its readers.

The files kind's dataset is served by the tests' moto server through the session's
proxy (``[reader] endpoint``), and the proxy fails the GETs of one object: a 500 on
each, or a stall. The readers give up after the workload's number of tries, each
bounded by its timeout, where the defaults (5 tries of 30 s) would go on for minutes.
"""

from __future__ import annotations

import re
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from s3util import BUCKET

from headrace.bench._files_kind import FilesKind
from headrace.bench._kind import make_kind
from headrace.bench._runner import RunOptions, run_workload
from headrace.bench._workload import builtin_workloads
from headrace.emulate import FaultRule, LatencyProxy
from headrace.errors import ConfigError, HeadraceError, TransientStorageError
from headrace.io import RetryPolicy
from headrace.testing import batch_digest

pytestmark = pytest.mark.integration

TRAIN = {"steps": 2, "trials": 1, "warmup_steps": 1, "batch_size": 4}


def _kind(tmp_path: Path, proxy: LatencyProxy, **reader: Any) -> FilesKind:
    url = f"s3://{BUCKET}/bench-requests-{uuid.uuid4().hex[:8]}"
    wl = builtin_workloads()["npz"].replace(
        dataset={"files": 4, "record_bytes": 2_000},
        reader={"storage": "s3", "storage_url": url, "endpoint": proxy.endpoint, **reader},
        train=TRAIN,
    )
    kind = make_kind(wl, str(tmp_path))
    assert isinstance(kind, FilesKind)
    kind.generate()
    return kind


def _read(kind: FilesKind) -> str:
    stream = kind.open("headrace", kind.workload.train.steps)
    try:
        return batch_digest(stream)
    finally:
        stream.close()


def _first_object(kind: FilesKind) -> str:
    """What the request line of a GET of the dataset's first object holds (not a listing's)."""
    name = Path(sorted(kind.files())[0]).name
    return f"{kind.store.url.removeprefix('s3://')}/{name} HTTP/"


@pytest.mark.parametrize("attempts", [1, 3])
def test_request_attempts_is_how_often_a_5xx_is_tried(
    tmp_path: Path, proxy: LatencyProxy, attempts: int
) -> None:
    kind = _kind(tmp_path, proxy, request_attempts=attempts)
    with kind.serve():
        assert kind.store.store_options()["retry"] == RetryPolicy(attempts=attempts)
        want = _read(kind)  # no fault: the batches
        proxy.reset_stats()
        proxy.set_faults([FaultRule(match=f"GET /{_first_object(kind)}", status=500)])
        with pytest.raises(TransientStorageError, match=rf"gave up after {attempts} attempts"):
            _read(kind)
        assert proxy.stats.faults_by_kind == {"status:500": attempts}
        proxy.set_faults([])
        assert _read(kind) == want
    result = kind.store.result_extras()
    assert result["request_attempts"] == attempts and "request_timeout_s" not in result


def test_request_timeout_s_bounds_a_stalled_get(tmp_path: Path, proxy: LatencyProxy) -> None:
    # The proxy holds the GET for 20 s; the workload allows 0.5 s and one try.
    kind = _kind(tmp_path, proxy, request_timeout_s=0.5, request_attempts=1)
    with kind.serve():
        proxy.set_faults(
            [FaultRule(kind="stall", stall_s=20.0, match=f"GET /{_first_object(kind)}")]
        )
        t0 = time.monotonic()
        with pytest.raises(TransientStorageError, match="gave up after 1 attempts"):
            _read(kind)
        took = time.monotonic() - t0
        assert proxy.stats.faults_by_kind == {"stall": 1}
    assert took < 10, took  # the timeout, not the proxy's 20 s stall (nor 30 s by default)
    assert kind.store.result_extras()["request_timeout_s"] == 0.5


def test_a_variant_option_cannot_change_them(tmp_path: Path, proxy: LatencyProxy) -> None:
    # Like the endpoint, they are the run's: a variant that names them is refused.
    kind = _kind(tmp_path, proxy, request_attempts=2)
    with kind.serve(), pytest.raises(ConfigError, match=r"unknown option 'request_attempts'"):
        kind.open("headrace?request_attempts=3", 1)


def test_a_variant_failing_in_its_process_says_what_each_try_met(
    tmp_path: Path, proxy: LatencyProxy
) -> None:
    # The measurement process's error line counts the tries; the retries it logged before
    # (what each met, after how long) come with it, or a failure under load says not why.
    kind = _kind(tmp_path, proxy, request_attempts=2)
    kind.workload = kind.workload.replace(variants=("headrace",))
    proxy.set_faults([FaultRule(match=f"GET /{_first_object(kind)}", status=500)])
    with pytest.raises(HeadraceError) as info:
        run_workload(kind, options=RunOptions(isolate=True))
    text = str(info.value)
    assert text.startswith("variant 'headrace' of workload 'npz': TransientStorageError: "), text
    assert "HTTP 500" in text and "gave up after 2 attempts" in text
    assert re.search(
        r" \(before it: headrace: s3://\S+: HTTP 500 .*; try 1 of 2 failed after \d+\.\d s, "
        r"trying again in \d+\.\d s\)$",
        text,
    ), text
