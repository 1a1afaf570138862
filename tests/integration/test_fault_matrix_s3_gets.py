"""GET faults on one object of a running source on S3, on the read paths that had no
such test (tests/_fault_cases.py; the changed objects are test_fault_matrix_s3.py).

Once the source is open and has read other objects clean, the GETs of one object (the
victim) meet

- ``slowdown``: 503 SlowDown every time: a ``TransientStorageError`` naming it ("gave
  up"), in bounded time (throttles do not use up attempts, but 4 times as many end it);
- ``cut-once``: its body cut short once (the full length said), its connection dropped
  once and a consistently short body once: retried, the local batches;
- ``short``: every body consistently short (a server that lies in its headers too): a
  ``StorageError`` naming it, never the short bytes decoded;
- ``stall-once``: one GET stalled past the try's timeout: retried, the local batches
  (only the paths whose stall no other test covers: a stall costs a 2 s timeout).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from s3util import BUCKET, FAST_RETRY, STALL_RETRY, STALL_S, S3Fixture
from test_fault_matrix_s3 import built, upload

from _fault_cases import CASES, read
from headrace.emulate import FaultRule, LatencyProxy
from headrace.errors import StorageError, TransientStorageError

pytestmark = pytest.mark.integration

__all__ = ["built"]  # the fixture, shared

FAULTS: dict[str, list[FaultRule]] = {
    "slowdown": [FaultRule(kind="status", status=503)],
    # Three faults at most: no GET meets more than its 4 tries allow.
    "cut-once": [
        FaultRule(kind="truncate", limit=1),
        FaultRule(kind="drop", limit=1),
        FaultRule(kind="short", limit=1),
    ],
    "short": [FaultRule(kind="short")],
    "stall-once": [FaultRule(kind="stall", stall_s=STALL_S, limit=1)],
}
# A stall costs a 2 s timeout: one ranged path (every ranged GET is a RemoteFile's),
# one whole-object path (FileList.fetch: tar, TFRecord and PNG files alike) and MDS's
# reader. Arrow's stalls are test_arrow_s3_faults', compressed MDS's test_mds_ahead_s3's.
STALLED = ("tar-samples", "tar-files", "mds")
CELLS = [
    (fault, name)
    for fault in sorted(FAULTS)
    for name in sorted(CASES)
    if fault != "stall-once" or name in STALLED
]


def _aimed(rule: FaultRule, match: str) -> FaultRule:
    fields: dict[str, Any] = {f: getattr(rule, f) for f in rule.__dataclass_fields__}
    return FaultRule(**{**fields, "match": match})


@pytest.mark.parametrize(("fault", "name"), CELLS)
def test_a_get_fault_on_one_object_is_retried_or_named(
    s3: S3Fixture, built: dict[str, Path], proxy: LatencyProxy, fault: str, name: str
) -> None:
    case = CASES[name]
    if name not in built:
        pytest.skip(f"{case.needs} is not installed")
    root = built[name]
    prefix = f"faultmatrix/{name}/{fault}"
    url = upload(s3, root, prefix)
    local = case.open(str(root), None)
    retry = STALL_RETRY if fault == "stall-once" else FAST_RETRY
    src = case.open(url, {**s3.options(), "retry": retry, "endpoint": proxy.endpoint})
    try:
        clean, on = case.split(src, case.victim)
        assert read(src, clean[:8]) == read(local, clean[:8])
        match = f"GET /{BUCKET}/{prefix}/{case.victim}"
        proxy.set_faults([_aimed(r, match) for r in FAULTS[fault]])
        want = read(local, on)
        t0 = time.monotonic()
        if fault in ("slowdown", "short"):
            error = TransientStorageError if fault == "slowdown" else StorageError
            with pytest.raises(error) as info:
                read(src, on)
            message = str(info.value)
            assert f"{prefix}/{case.victim}" in message, message
            assert ("gave up" if fault == "slowdown" else "short") in message, message
        else:
            assert read(src, on) == want
            assert proxy.stats.faults == sum(r.limit or 0 for r in FAULTS[fault])
        assert time.monotonic() - t0 < 20
        proxy.set_faults([])
        assert read(src, clean[-8:]) == read(local, clean[-8:])
    finally:
        src.close()
        local.close()
