"""A row group with more than 2 GiB of one column's strings is read whole: pyarrow's
``combine_chunks`` cannot make it one array of 32-bit offsets and keeps it in pieces,
of which the first alone was read until 2026-12-07 (the other rows lost, silently).

The strings are zeros of memory never written (the kernel's one zero page, read: no
memory, no disk, and none of the page faults a sparse file's mapped pages cost), but
pyarrow's pieces and the cast to 64-bit offsets copy them: the test needs ~6 GiB of
memory and is skipped on a machine with less available."""

from __future__ import annotations

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
def test_strings_past_2_gib_in_a_row_group_are_read_whole() -> None:
    rows, size = 1025, 1 << 20  # two pieces of 1025 MiB: past 2**31 bytes together
    data = pa.py_buffer(np.zeros(rows * size, np.uint8))  # (calloc: pages mapped on read)
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
