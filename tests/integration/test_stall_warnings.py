"""While a step waits on slow storage, the loader says which reads it waits for.

A slow FUSE mount (slowfs) answers each READ after 1.5 s, an S3 endpoint (moto
behind the latency proxy) each request after 1.5 s: a loader warned at 0.3 s
names the file or object and a byte range, says again as the wait goes on, and
once more when the batch comes; its batches are those of the same loader on fast
storage. The registry itself (headrace.io.reads_in_flight) is checked for each
local read path while a read of the mount is stuck.
"""

from __future__ import annotations

import re
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from s3util import BUCKET, S3Fixture, StoreFactory
from s3util import store_options as options

from headrace.emulate import LatencyProxy, SlowMount
from headrace.errors import ConfigError, ObjectNotFoundError
from headrace.formats import TokenSource
from headrace.io import RangeReader, ReaderConfig, ReadInFlight, reads_in_flight
from headrace.io._uring import ring_pool
from headrace.pipeline import Loader
from headrace.testing import batch_digest

pytestmark = pytest.mark.integration

_RANGE = r" \[(\d+), (\d+)\) \(\d+\.\d s\)"


@pytest.fixture
def src_dir(tmp_path: Path) -> Path:
    d = tmp_path / "src"
    d.mkdir()
    np.random.default_rng(8).integers(0, 2**31, 1 << 20, dtype=np.uint32).tofile(d / "t.bin")
    return d


def _warned_run(url: str, prefetch: int, **kw: Any) -> tuple[str, list[str]]:
    """The digest of a step read with stall_warn_s=0.3, and what the loader said."""
    src = TokenSource(url, dtype="uint32", context=64, **kw)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        with Loader(src, batch_size=4, steps=1, prefetch=prefetch, stall_warn_s=0.3) as loader:
            digest = batch_digest(loader)
    return digest, [str(w.message) for w in said]


def _check_said(said: list[str], name: str) -> None:
    stalls = [s for s in said if s.startswith("headrace: no batch for ")]
    # The first step waits 1.5 s or more: warned at 0.3, 0.6 and 1.2 s at least.
    assert len(stalls) >= 3, said
    named = [s for s in stalls if re.search(re.escape(name) + _RANGE, s)]
    assert named, said
    assert all("stalled storage? (docs/io.md" in s for s in named), named
    # One line when the batch comes, for each step it warned about.
    waited = {re.findall(r"\(step (\d+)\)", s)[0] for s in stalls}
    came = [re.fullmatch(r"headrace: the batch of step (\d+) came after .* s", s) for s in said]
    assert sorted(m[1] for m in came if m) == sorted(waited), said


@pytest.mark.parametrize("prefetch", [0, 8])
def test_a_loader_on_a_slow_mount_names_the_reads_it_waits_for(
    slow_mount: Callable[..., SlowMount], src_dir: Path, prefetch: int
) -> None:
    m = slow_mount(src_dir, read_latency_ms=1500)
    digest, said = _warned_run(str(m.mnt / "t.bin"), prefetch)
    _check_said(said, str(m.mnt / "t.bin"))
    fast, _ = _warned_run(str(src_dir / "t.bin"), prefetch)
    assert digest == fast


def test_a_loader_on_a_slow_s3_endpoint_names_the_objects_it_waits_for(
    s3: S3Fixture, src_dir: Path
) -> None:
    key = "stall-warn/t.bin"
    s3.server.info.boto3_client().put_object(
        Bucket=BUCKET, Key=key, Body=(src_dir / "t.bin").read_bytes()
    )
    with LatencyProxy(s3.server.endpoint, latency_ms=1500) as proxy:
        url = f"s3://{BUCKET}/{key}"
        digest, said = _warned_run(url, 8, store_options=options(s3, proxy.endpoint))
    _check_said(said, url)
    fast, _ = _warned_run(str(src_dir / "t.bin"), 8)
    assert digest == fast


def _strategies() -> list[tuple[str, str]]:
    out = [("pread", "threads"), ("mmap", "threads"), ("odirect", "threads")]
    if ring_pool().available:
        out += [("pread", "uring"), ("odirect", "uring")]
    return out


@pytest.mark.parametrize(("strategy", "engine"), _strategies())
def test_each_local_read_is_in_flight_while_the_mount_answers_slowly(
    slow_mount: Callable[..., SlowMount], src_dir: Path, strategy: Any, engine: Any
) -> None:
    m = slow_mount(src_dir, read_latency_ms=600)
    path = str(m.mnt / "t.bin")
    reader = RangeReader(ReaderConfig(strategy=strategy, engine=engine))
    try:
        reader.size(path)  # opened before the read: the open's round trips are not reads
        seen: list[ReadInFlight] = []
        failed: list[BaseException] = []

        def read() -> None:
            try:
                reader.read(path, [(1 << 20, 4096), (3 << 20, 100)])
            except BaseException as exc:
                failed.append(exc)

        t = threading.Thread(target=read)
        t.start()
        while t.is_alive() and not seen:
            seen = [r for r in reads_in_flight() if r.where == path]
            time.sleep(0.02)
        t.join()
        if failed and isinstance(failed[0], ConfigError) and strategy == "odirect":
            pytest.skip(f"no O_DIRECT on this FUSE mount: {failed[0]}")
        assert not failed, failed
        assert seen, "no read of the mount was ever in flight"
        r = seen[0]
        assert r.start is not None and r.end is not None
        # Every entry lies within the requested bytes (both ranges start page-aligned,
        # so a populate or an O_DIRECT read starts there too) and covers one of them.
        assert 1 << 20 <= r.start < r.end <= (3 << 20) + 4096
        assert r.start <= (1 << 20) < r.end or r.start <= (3 << 20) < r.end, r
        assert r.age_s >= 0 and str(r).startswith(f"{path} [{r.start}, {r.end}) (")
        assert not [x for x in reads_in_flight() if x.where == path]  # none left behind
    finally:
        reader.close()


def test_an_object_request_that_fails_is_not_left_in_flight(open_store: StoreFactory) -> None:
    store = open_store()
    with pytest.raises(ObjectNotFoundError, match=r"stall-warn/missing\.bin"):
        store.get_range("stall-warn/missing.bin", 0, 10)
    with pytest.raises(ObjectNotFoundError, match=r"stall-warn/missing\.bin"):
        store.get_many([("stall-warn/missing.bin", 0, 10)])
    assert not [r for r in reads_in_flight() if "stall-warn/missing.bin" in r.where]
