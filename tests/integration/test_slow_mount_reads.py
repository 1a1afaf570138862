"""The I/O engine and the token loader on a real slow mount (slowfs, FUSE).

These check behaviour, not speed: every strategy returns the same bytes
through a mount with 10 ms per READ, and the adaptive reader, which starts on
mapped reads, moves to parallel positional reads there without a mapped read
(one row read alone takes 10 ms, so 64 rows mapped, one fault after another,
would take far longer). The speed-ups themselves are in benchmarks/io_adaptive.py
and benchmarks/adaptive_slowfs.py (docs/io.md).
"""

from __future__ import annotations

import hashlib
from itertools import islice
from pathlib import Path

import numpy as np
import pytest

from headrace.formats import TokenSource
from headrace.io import AdaptivePolicy, RangeReader, ReaderConfig, io_threads
from headrace.io._uring import ring_pool
from headrace.pipeline import Loader
from headrace.testing import batch_digest

pytestmark = pytest.mark.integration

ROWS, WIDTH = 2048, 4100


@pytest.fixture
def src_dir(tmp_path: Path) -> Path:
    d = tmp_path / "src"
    d.mkdir()
    rng = np.random.default_rng(5)
    rng.integers(0, 256, ROWS * WIDTH, dtype=np.uint8).tofile(d / "rows.bin")
    rng.integers(0, 2**31, 300_000, dtype=np.uint32).tofile(d / "tokens.bin")
    return d


def test_every_strategy_reads_the_same_rows_through_a_slow_mount(slow_mount, src_dir):
    m = slow_mount(src_dir, read_latency_ms=10)
    rows = np.random.default_rng(1).choice(ROWS, 64, replace=False)
    want = np.fromfile(src_dir / "rows.bin", dtype=np.uint8).reshape(ROWS, WIDTH)[rows]
    for strategy in ("mmap", "pread", "adaptive"):
        with RangeReader(strategy) as r:
            got = r.read_rows(str(m.mnt / "rows.bin"), rows, WIDTH)
        assert hashlib.sha256(got).digest() == hashlib.sha256(want).digest(), strategy


def test_adaptive_reader_moves_to_parallel_reads_on_slow_storage(slow_mount, src_dir):
    m = slow_mount(src_dir, read_latency_ms=10)
    path = str(m.mnt / "rows.bin")
    cfg = ReaderConfig(strategy="adaptive", policy=AdaptivePolicy(slow_read_s=0.010))
    order = np.random.default_rng(2).permutation(ROWS)
    with RangeReader(cfg) as r:
        assert r.stats.current_mode == "mmap"
        for i in range(4):
            r.read_rows(path, order[i * 64 : (i + 1) * 64], WIDTH)
        assert r.stats.current_mode == "pread"
        assert r.stats.mode_switches >= 1
        # It never walked a batch mapped: the first read's check timed one row
        # alone (>= 10 ms, so 64 would be slow) and read the batch in parallel.
        assert r.stats.mapped_declined >= 1
        assert r.stats.reads_by_mode == {"pread": 4}
    assert m.stats()["max_in_flight"] > 1  # the parallel reads really overlapped


@pytest.mark.skipif(
    not ring_pool().available(), reason=f"io_uring unavailable: {ring_pool().reason}"
)
def test_pread_on_io_uring_keeps_more_reads_waiting_than_the_thread_pool(slow_mount, src_dir):
    # On io_uring a read in flight costs a ring entry, not a thread: by default
    # all 64 rows of a batch wait on the mount at once, not the pool's 8.
    m = slow_mount(src_dir, read_latency_ms=10)
    rows = np.random.default_rng(3).choice(ROWS, 64, replace=False)
    want = np.fromfile(src_dir / "rows.bin", dtype=np.uint8).reshape(ROWS, WIDTH)[rows]
    with RangeReader("pread") as r:
        got = r.read_rows(str(m.mnt / "rows.bin"), rows, WIDTH)
        assert r.stats.engine == "uring"
    assert np.array_equal(got, want)
    # More than the pool's threads could hold; not 2x that: under a loaded CI run the
    # mount's server saw 12 at once (io-wq workers and the FUSE queue pace the rest).
    assert m.stats()["max_in_flight"] > io_threads()


def test_token_loader_through_a_slow_mount_matches_local(slow_mount, src_dir):
    m = slow_mount(src_dir, read_latency_ms=5)

    def digest(root: Path) -> str:
        src = TokenSource(
            root / "tokens.bin",
            dtype="uint32",
            context=64,
            window_bytes=256 * 1024,
            block_bytes=16 * 1024,
        )
        with Loader(src, batch_size=16, seed=9) as ld:
            return batch_digest(islice(iter(ld), 40))

    assert digest(m.mnt) == digest(src_dir)


def test_a_first_batch_through_a_slow_mount_counts_its_samples_not_their_blocks(
    slow_mount, src_dir, monkeypatch
):
    from headrace.formats import _token_window

    m = slow_mount(src_dir, read_latency_ms=5)
    tokens = np.fromfile(src_dir / "tokens.bin", dtype=np.uint32)
    got = {}
    for sample_first in (True, False):
        monkeypatch.setattr(_token_window, "_SAMPLE_FIRST", sample_first)
        src = TokenSource(
            m.mnt / "tokens.bin", dtype="uint32", context=64, block_bytes=256 << 10
        )  # each open starts cold: slowfs drops the file's page cache
        batch = src.read(3, np.arange(8))
        _, offsets = src.starts(3, np.arange(8))
        assert np.array_equal(batch["y"], np.stack([tokens[o + 1 : o + 65] for o in offsets]))
        got[sample_first] = (batch["x"].copy(), src.stats.bytes_read)
        src.close()
    block = 256 << 10
    touched = {
        b for o in offsets.tolist() for b in range(o * 4 // block, (o + 65) * 4 // block + 1)
    }
    assert np.array_equal(got[True][0], got[False][0])
    assert got[False][1] == sum(min(block, tokens.nbytes - b * block) for b in touched)
    assert 0 < got[True][1] <= 8 * (65 * 4 + 4096) < got[False][1]
