"""Faults from a source's open on, on S3: the first GETs (a header walk, index.json, a
footer, a whole object), or the listing of its prefix, meet a cut body, a consistently
short one and a 503, and every sample reads as the local copy's, on every read path of
tests/_fault_cases.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from s3util import BUCKET, FAST_RETRY, S3Fixture
from test_fault_matrix_s3 import built, upload

from _fault_cases import CASES, read
from headrace.emulate import FaultRule, LatencyProxy

pytestmark = pytest.mark.integration

__all__ = ["built"]  # the fixture, shared


def _read_as_local_through(
    s3: S3Fixture,
    built: dict[str, Path],
    proxy: LatencyProxy,
    name: str,
    at: str,
    match: str,
    every: tuple[int, int],
) -> None:
    """Case ``name`` uploaded under ``faultmatrix/NAME/AT``: its source, opened through
    ``proxy`` with a cut body, a short one and a 503 for requests ``match`` matches
    (``{prefix}``: the upload's; the short one and the 503 at the ``every`` th of
    them), reads every sample as the local copy's."""
    case = CASES[name]
    if name not in built:
        pytest.skip(f"{case.needs} is not installed")
    root = built[name]
    prefix = f"faultmatrix/{name}/{at}"
    url = upload(s3, root, prefix)
    local = case.open(str(root), None)
    match = match.format(prefix=f"/{BUCKET}/{prefix}/")
    proxy.set_faults(
        [
            FaultRule(kind="truncate", match=match, limit=1),
            FaultRule(kind="short", match=match, every=every[0], limit=1),
            FaultRule(kind="status", status=503, match=match, every=every[1], limit=1),
        ]
    )
    src = case.open(url, {**s3.options(), "retry": FAST_RETRY, "endpoint": proxy.endpoint})
    try:
        clean, on = case.split(local, case.victim)
        samples = np.sort(np.concatenate([clean, on]))
        assert read(src, samples) == read(local, samples)
        assert proxy.stats.faults == 3
    finally:
        src.close()
        local.close()


@pytest.mark.parametrize("name", sorted(CASES))
def test_faults_from_the_open_on_are_retried_to_the_local_batches(
    s3: S3Fixture, built: dict[str, Path], proxy: LatencyProxy, name: str
) -> None:
    # The first GETs of the source (a header walk, index.json, a footer, a listing's
    # first object) meet a cut body, a short one and a 503, and every sample reads as
    # the local copy's.
    _read_as_local_through(s3, built, proxy, name, "at-open", "GET {prefix}", (2, 3))


@pytest.mark.parametrize("name", sorted(CASES))
def test_listings_cut_short_or_failed_at_the_open_are_retried_to_the_local_batches(
    s3: S3Fixture, built: dict[str, Path], proxy: LatencyProxy, name: str
) -> None:
    # Every source lists its prefix: the listing meets a cut body, then one whose XML is
    # cut with a Content-Length that agrees (it failed the open, not retried, until
    # 2026-12-06: "Got invalid list response"), then a 503.
    _read_as_local_through(s3, built, proxy, name, "listing", "list-type=2", (1, 1))
