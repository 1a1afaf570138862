"""Bytes a reader fetches from a network or FUSE mount for the bytes asked for.

A loader reads a chunk of steps at once (32 steps of 32 rows: 1,024 random rows of a
16,384-row file, ~64 KiB apart on average), so coalescing across gaps of up to 64 KiB
(``max_gap``'s default) reads most of the stretch the rows lie in: 3-5x the bytes asked
through slowfs, where the pages the rows lie on are 1.8x. That trade (fewer, longer
READs) is the default; ``max_gap=0`` reads the rows' pages only, mapped reads too.
Counted by the bytes and READs the mount served, never by time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headrace.io import RangeReader, ReaderConfig
from headrace.io._mapped import pages_touched

ROWS, ROW = 4096, 4100  # 1,025 int32 a row; 16 MiB, a quarter of the file
PICK = 256  # rows a read: one every 16 rows, as a loader's chunk of 1,024 of 16,384


def _read(
    slow_mount: Any, tmp_path: Path, cfg: ReaderConfig, calls: int = 2, **mount: Any
) -> tuple[dict[str, Any], int]:
    """(the mount's stats, bytes of the pages the rows lie on) after ``calls`` reads of
    PICK random rows, each checked against the file's bytes."""
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    data = np.random.default_rng(0).integers(0, 256, ROWS * ROW, dtype=np.uint8)
    (src / "rows.bin").write_bytes(data.tobytes())
    data = data.reshape(ROWS, ROW)
    m = slow_mount(src, **mount)
    path = str(m.mnt / "rows.bin")
    rng = np.random.default_rng(1)
    offsets = []
    with RangeReader(cfg) as r:
        for _ in range(calls):
            rows = rng.integers(0, ROWS, PICK)
            got = r.read_rows(path, rows, ROW)
            assert np.array_equal(got, data[rows])
            offsets.append(rows.astype(np.int64) * ROW)
    off = np.concatenate(offsets)
    return m.stats(), pages_touched(off, np.full(off.size, ROW, dtype=np.int64))


@pytest.mark.integration
@pytest.mark.parametrize("strategy", ["mmap", "adaptive", "pread"])
def test_max_gap_0_reads_the_rows_pages_only_on_a_mount(
    slow_mount: Any, tmp_path: Path, strategy: Any
) -> None:
    # Before, a mapped read's populate merged page runs up to 64 KiB apart whatever
    # max_gap said: mmap served 2.9x the pages' bytes with max_gap=0. Kernel readahead
    # may add a little (a few 16-32 KiB READs as the cache fills): 1.3x is the bound.
    cfg = ReaderConfig(strategy=strategy, max_gap=0)
    stats, pages = _read(slow_mount, tmp_path, cfg, read_latency_ms=1)
    assert stats["bytes_read"] <= 1.3 * pages, (stats["bytes_read"], pages)


@pytest.mark.integration
def test_max_gap_0_odirect_reads_the_rows_blocks_only_on_a_direct_io_mount(
    slow_mount: Any, tmp_path: Path
) -> None:
    # --direct-io: each O_DIRECT read is one READ of its own size, no page cache.
    cfg = ReaderConfig(strategy="odirect", max_gap=0)
    stats, pages = _read(slow_mount, tmp_path, cfg, direct_io=True)
    assert stats["bytes_read"] <= 1.1 * pages, (stats["bytes_read"], pages)


@pytest.mark.integration
def test_a_mapped_read_on_a_mount_keeps_its_runs_in_flight_at_once(
    slow_mount: Any, tmp_path: Path
) -> None:
    # Each run of pages used to be asked for and populated before the next was asked
    # for: one READ in flight at a time for rows apart (max_in_flight 1), a round trip
    # per row. Now every run is asked for first.
    cfg = ReaderConfig(strategy="mmap", max_gap=0)
    stats, _ = _read(slow_mount, tmp_path, cfg, calls=1, read_latency_ms=5)
    assert stats["max_in_flight"] >= 16, stats["max_in_flight"]
