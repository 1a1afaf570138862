"""While a step waits on slow storage, the loader says which reads it waits for.

A slow FUSE mount (slowfs) answers each READ after 1.5 s, an S3 endpoint (moto
behind the latency proxy) each request after 1.5 s: a loader warned at 0.3 s
names the file or object and a byte range, says again as the wait goes on, and
once more when the batch comes; its batches are those of the same loader on fast
storage. The registry itself (headrace.io.reads_in_flight) is checked for each
local read path while a read of the mount is stuck, and for opens, stats and
listings while the mount answers those slowly (slowfs open and stat latency).
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
from headrace.formats import Table, TokenSource
from headrace.formats._file_walk import stat_listed, walk
from headrace.formats._token_paths import expand_token_paths
from headrace.io import LocalFile, RangeReader, ReaderConfig, ReadInFlight, reads_in_flight
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
            # Reads only: O_DIRECT's reopen of the file is in flight too, as an "open".
            seen = [r for r in reads_in_flight() if r.where == path and r.what == "read"]
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


@pytest.mark.parametrize("prefetch", [0, 8])
def test_a_loader_waiting_on_a_slow_open_names_the_file_it_opens(
    slow_mount: Callable[..., SlowMount], src_dir: Path, prefetch: int
) -> None:
    # Each open of the mount answers after 1.5 s (the loader opens the file anew):
    # the warning named no read ("no read of this process is in flight").
    m = slow_mount(src_dir, open_latency_ms=1500)
    path = str(m.mnt / "t.bin")
    digest, said = _warned_run(path, prefetch)
    stalls = [s for s in said if s.startswith("headrace: no batch for ")]
    assert len(stalls) >= 3, said
    opens = [s for s in stalls if re.search(r"1 open in flight.*: open " + re.escape(path), s)]
    assert opens and all(re.search(r"open \S+ \(\d+\.\d s\);", s) for s in opens), said
    assert any(s.startswith("headrace: the batch of step 0 came after ") for s in said), said
    fast, _ = _warned_run(str(src_dir / "t.bin"), prefetch)
    assert digest == fast


def _seen_while(run: Callable[[], Any]) -> tuple[Any, set[tuple[str, str, int | None]]]:
    """What ``run`` returned, and what this process had in flight (what, where, start)
    while it ran in another thread."""
    seen: set[tuple[str, str, int | None]] = set()
    done: list[Any] = []
    failed: list[BaseException] = []

    def target() -> None:
        try:
            done.append(run())
        except BaseException as exc:
            failed.append(exc)

    t = threading.Thread(target=target)
    t.start()
    while t.is_alive():
        seen.update((r.what, r.where, r.start) for r in reads_in_flight())
        time.sleep(0.02)
    t.join()
    if failed:
        raise failed[0]
    return done[0], seen


def _no_store() -> Any:
    raise AssertionError("a local glob asked for an object store")


def test_opens_stats_and_listings_of_a_slow_mount_are_in_flight(
    slow_mount: Callable[..., SlowMount], src_dir: Path
) -> None:
    for name in ("d", "e"):
        (src_dir / name).mkdir()
        for i in range(2):
            np.arange(10, dtype=np.uint16).tofile(src_dir / name / f"{i}.bin")
    # Every lookup, stat and listing answers after 0.3 s, every open after 0.3 s more.
    # Each call below is on names not yet looked up: the kernel caches them for 1 s (a
    # folder's listing may fill that cache, so a walk's stats need not reach the mount).
    m = slow_mount(src_dir, stat_latency_ms=300, open_latency_ms=300)
    d, e, t = m.mnt / "d", m.mnt / "e", str(m.mnt / "t.bin")
    walked, seen = _seen_while(lambda: walk(d, (".bin",)))
    assert walked.keys == ["0.bin", "1.bin"]
    assert ("list", str(d), None) in seen, seen
    globbed, seen = _seen_while(lambda: expand_token_paths([str(e / "*.bin")], _no_store))
    assert globbed == [str(e / "0.bin"), str(e / "1.bin")]
    assert ("list", str(e / "*.bin"), None) in seen, seen
    st, seen = _seen_while(lambda: stat_listed(t))
    assert st.st_size == 4 << 20 and seen == {("stat", t, None)}, seen
    f, seen = _seen_while(lambda: LocalFile(t))
    with f:
        assert seen == {("open", t, None)}, seen  # an open reads nothing
    assert not [r for r in reads_in_flight() if r.where.startswith(str(m.mnt))]


def test_a_table_files_open_on_a_slow_mount_is_in_flight(
    slow_mount: Callable[..., SlowMount], tmp_path: Path
) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    src = tmp_path / "tables"
    src.mkdir()
    pq.write_table(pa.table({"x": np.arange(100)}), src / "t.parquet")
    m = slow_mount(src, open_latency_ms=300)
    path = str(m.mnt / "t.parquet")
    table, seen = _seen_while(lambda: Table.open(path))
    with table:
        assert ("open", path, None) in seen, seen  # its stat, open, header and footer
        np.testing.assert_array_equal(table.read_rows(np.arange(3))["x"], [0, 1, 2])
    assert not [r for r in reads_in_flight() if r.where == path]
