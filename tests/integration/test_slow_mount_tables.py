"""Local tables on a real slow mount (slowfs, FUSE): Parquet row groups read at once,
mapped Arrow pages filled at once.

A behaviour check, not a timing: a batch whose rows lie in eight row groups keeps
several READs in flight, where decoding the groups one after another kept at most
two (pyarrow reads one group's column chunks in turn); a batch of a memory-mapped
Arrow file, gathered by page faults, kept three. The speed-ups are in
benchmarks/parquet_slowfs.py and benchmarks/arrow_slowfs.py (docs/emulate-slowfs.md).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from headrace.formats import Table

pytestmark = pytest.mark.integration

ROWS, GROUP = 4096, 512


def test_a_batch_across_row_groups_keeps_reads_in_flight(slow_mount, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    rng = np.random.default_rng(3)
    ids = rng.integers(0, 2**31, (ROWS, 64), dtype=np.int64)
    table = pa.table({"ids": pa.FixedSizeListArray.from_arrays(ids.reshape(-1), 64)})
    for k in range(3):
        pq.write_table(table, src / f"t{k}.parquet", row_group_size=GROUP)
    rows = np.arange(ROWS // GROUP) * GROUP + 7  # one row in each of the 8 row groups
    # 50 ms a READ, the best of three files (each read once: no page cache): a full
    # run's busy cores once let only 3 of the 8 groups' READs start while the first
    # ones waited, at 20 ms and again at 50 (2026-12-05).
    m = slow_mount(src, read_latency_ms=50)
    for k in range(3):
        with Table.open(m.mnt / f"t{k}.parquet") as tb:
            got = tb.read_rows(rows)["ids"]
        np.testing.assert_array_equal(got, ids[rows])
    # One group at a time: 2 READs in flight at most (measured); at once: 8 groups' worth.
    assert m.stats()["max_in_flight"] >= 4


def test_a_batch_of_a_mapped_arrow_file_keeps_reads_in_flight(slow_mount, tmp_path: Path) -> None:
    # Gathered by page faults, one after another: 3 READs in flight at most
    # (measured); filled first on the I/O pool: a batch's pages at once.
    src = tmp_path / "src"
    src.mkdir()
    rng = np.random.default_rng(4)
    n, width = 4096, 256  # 1 KiB of ids a row: rows 128 apart are 128 KiB apart
    offs = np.arange(n + 1, dtype=np.int32) * width
    ids = rng.integers(0, 2**31, n * width, dtype=np.int32)
    table = pa.table({"ids": pa.ListArray.from_arrays(pa.array(offs), pa.array(ids))})
    with pa.OSFile(str(src / "t.arrow"), "wb") as f, pa.ipc.new_stream(f, table.schema) as w:
        w.write_table(table)
    rows = np.arange(16) * 256 + 5
    m = slow_mount(src, read_latency_ms=20)
    with Table.open(m.mnt / "t.arrow") as tb:
        got = tb.read_rows(rows)["ids"]
    np.testing.assert_array_equal(got.values, ids.reshape(n, width)[rows].reshape(-1))
    assert m.stats()["max_in_flight"] >= 4
