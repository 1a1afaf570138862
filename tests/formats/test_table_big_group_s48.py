"""A row group with more than 2 GiB of one column's strings is read whole: pyarrow's
``combine_chunks`` cannot make it one array of 32-bit offsets and keeps it in pieces,
of which the first alone was read until 2026-12-07 (the other rows lost, silently).

The 2 GiB are a sparse file's pages mapped (zeros, no disk), but the cast to 64-bit
offsets copies them: the test needs ~6 GiB of memory and is skipped on a machine
with less available."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from headrace.formats._arrow_numpy import one_batch


def _available_gib() -> float:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 2**20
    return 0.0


def test_a_small_table_is_its_one_batch_as_it_is() -> None:
    t = pa.table({"s": pa.chunked_array([pa.array(["a", "bc"]), pa.array(["d"])])})
    b = one_batch(pa, t)
    assert b.schema == t.schema and b.column("s").to_pylist() == ["a", "bc", "d"]


@pytest.mark.skipif(_available_gib() < 12, reason="needs ~6 GiB of memory free")
def test_strings_past_2_gib_in_a_row_group_are_read_whole(tmp_path: Path) -> None:
    rows, size = 1100, 1 << 20  # two pieces of 1.1 GiB: past 2**31 bytes together
    path = tmp_path / "zeros"
    with open(path, "wb") as f:
        f.truncate(rows * size)
    data = pa.memory_map(str(path)).read_buffer()
    offsets = pa.py_buffer((np.arange(rows + 1, dtype=np.int32) * size).tobytes())
    piece = pa.StringArray.from_buffers(rows, offsets, data)
    t = pa.table({"s": pa.chunked_array([piece, piece]), "i": np.arange(2 * rows)})
    assert len(t.combine_chunks().to_batches()) == 2  # pyarrow's pieces
    b = one_batch(pa, t)
    assert b.num_rows == 2 * rows
    assert b.column("i").to_numpy().tolist() == list(range(2 * rows))
    s = b.column("s")
    assert pa.types.is_large_string(s.type)
    offs = np.frombuffer(s.buffers()[1], np.int64)[: 2 * rows + 1]
    assert (np.diff(offs) == size).all()
