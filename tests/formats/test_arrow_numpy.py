"""Bools, validity bitmaps and null-filled values unpacked from Arrow buffers
(:mod:`headrace.formats._arrow_numpy`): the bytes pyarrow's ``to_numpy`` and
``fill_null`` give, for arrays read from real Arrow and Parquet files, sliced at
every bit offset, and chunked."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest

from headrace.formats._arrow_numpy import bits, numbers, valid_rows, zero_filled

N = 203  # not a multiple of 8: the last bitmap byte is partly used


def _table() -> pa.Table:
    rng = np.random.default_rng(7)
    null = rng.random(N) < 0.3
    flags = rng.random(N) < 0.5
    ints = rng.integers(-(2**62), 2**62, N)
    return pa.table(
        {
            "b": pa.array(flags),
            "bn": pa.array(flags, mask=null),
            "i": pa.array(ints, mask=null),
            "h": pa.array(rng.random(N).astype(np.float16), mask=null),
            "u": pa.array(ints.astype(np.uint8)),
            "none": pa.nulls(N, pa.int32()),
        }
    )


def _files(tmp_path: Path) -> dict[str, list[Any]]:
    """Each column's chunks, read back from an Arrow file (memory-mapped, record
    batches of 64 rows) and a Parquet file (row groups of 50, read as one table)."""
    t = _table()
    arrow, parquet = tmp_path / "t.arrow", tmp_path / "t.parquet"
    with ipc.new_file(arrow, t.schema) as w:
        w.write_table(t, max_chunksize=64)
    pq.write_table(t, parquet, row_group_size=50)
    read = {
        "arrow": ipc.open_file(pa.memory_map(str(arrow))).read_all(),
        "parquet": pq.read_table(parquet),
    }
    return {f"{k}:{c}": tb.column(c).chunks for k, tb in read.items() for c in t.column_names}


def _digest(arrays: list[np.ndarray]) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(str(a.dtype).encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def _slices(chunks: list[Any]) -> list[Any]:
    """Each chunk whole, and sliced at every bit offset of a byte, to lengths that end
    mid-byte and at the chunk's end; and the chunks combined."""
    out = []
    for c in [*chunks, pa.chunked_array(chunks).combine_chunks()]:
        out.append(c)
        for start in range(min(17, len(c))):
            out += [c.slice(start), c.slice(start, max(0, min(13, len(c) - start - 1)))]
    return out


def test_valid_rows_and_bools_are_to_numpys_bytes(tmp_path: Path) -> None:
    for name, chunks in _files(tmp_path).items():
        parts = _slices(chunks)
        assert len(parts) > 30, name
        want = [p.is_valid().to_numpy(zero_copy_only=False) for p in parts]
        got = [valid_rows(p) for p in parts]
        assert _digest(got) == _digest(want), name
        if name.endswith(":b"):
            want = [p.to_numpy(zero_copy_only=False) for p in parts]
            assert _digest([numbers(p) for p in parts]) == _digest(want), name


def test_zero_filled_is_fill_nulls_bytes(tmp_path: Path) -> None:
    filled = 0
    for name, chunks in _files(tmp_path).items():
        for p in _slices(chunks):
            zero = False if pa.types.is_boolean(p.type) else 0
            want = p.fill_null(zero).to_numpy(zero_copy_only=False)
            got = zero_filled(p)
            assert got.dtype == want.dtype, name
            assert got.tobytes() == want.tobytes(), (name, p.offset, len(p))
            filled += bool(p.null_count)
    assert filled > 100  # most slices hold nulls


def test_zero_filled_copies_and_leaves_the_files_buffer_alone(tmp_path: Path) -> None:
    chunks = _files(tmp_path)["arrow:i"]
    c = next(c for c in chunks if c.null_count)
    before = c.buffers()[1].to_pybytes()
    got = zero_filled(c)
    assert got.flags.writeable
    assert (got[~valid_rows(c)] == 0).all()
    assert c.buffers()[1].to_pybytes() == before
    whole = _files(tmp_path)["arrow:u"][0]
    assert not zero_filled(whole).flags.writeable  # no nulls: a view of the file


def test_bits_reads_lsb_first_at_any_offset() -> None:
    buf = pa.py_buffer(bytes([0b1000_0001, 0b0000_0110]))
    assert bits(buf, 0, 16).tolist() == [1, 0, 0, 0, 0, 0, 0, 1, 0, 1, 1, 0, 0, 0, 0, 0]
    assert bits(buf, 7, 4).tolist() == [True, False, True, True]
    assert bits(buf, 3, 0).size == 0


def test_strings_validity_and_bools_without_a_copy_take_pyarrow() -> None:
    s = pa.array(["x", None, "z"])
    assert valid_rows(s).tolist() == [True, False, True]
    assert numbers(s).tolist() == ["x", None, "z"]
    with pytest.raises(pa.ArrowInvalid):  # no copy allowed: a bool must be unpacked
        numbers(pa.array([True]), zero_copy_only=True)
