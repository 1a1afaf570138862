"""Fixed-size token lists (datasets' Sequence(Value(...), length=N)) packed as lists are."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from headrace.errors import DataError
from headrace.formats import TokenSource, table_token_files

L = 8


def _write(path: Path, table: pa.Table, chunk: int) -> None:
    with pa.ipc.new_stream(str(path), table.schema) as w:
        for b in table.to_batches(max_chunksize=chunk):
            w.write_batch(b)


def test_fixed_size_token_lists_are_a_stream_with_a_document_a_row(tmp_path: Path) -> None:
    # Blocks already cut to a length (run_clm's group_texts with its features fixed)
    # are a fixed_size_list: refused before as "not a column of token id lists".
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 60_000, (90, 5)).astype(np.uint16)
    typ = pa.list_(pa.uint16(), 5)
    table = pa.table(
        {"text": [f"r{i}" for i in range(90)], "input_ids": pa.array(list(ids), type=typ)}
    )
    _write(tmp_path / "a.arrow", table.slice(7), chunk=20)  # sliced: offsets past 0
    want = ids[7:].reshape(-1)
    (tf,) = table_token_files(tmp_path / "a.arrow")
    assert tf.dtype == np.uint16 and tf.num_tokens == want.size
    assert tf.bounds is not None
    assert np.array_equal(tf.bounds, np.arange(0, want.size + 1, 5))
    src = TokenSource([tf], context=L, window_bytes=4096, block_bytes=4096, positions="documents")
    samples = np.arange(src.samples_per_epoch, dtype=np.int64)
    got = src.read(2, samples)
    _, offsets = src.starts(2, samples)
    assert np.array_equal(got["x"], want[offsets[:, None] + np.arange(L)])
    assert np.array_equal(got["y"], want[offsets[:, None] + np.arange(1, L + 1)])
    cols = offsets[:, None] + np.arange(L)
    assert np.array_equal(got["position_ids"], np.minimum(cols % 5, np.arange(L)))
    src.close()


def test_fixed_size_lists_with_null_rows_are_refused_by_row(tmp_path: Path) -> None:
    rows = [[1, 2], None, [3, 4]] * 5
    _write(
        tmp_path / "n.arrow", pa.table({"input_ids": pa.array(rows, pa.list_(pa.int32(), 2))}), 15
    )
    with pytest.raises(
        DataError, match=r"n\.arrow: column 'input_ids' has 5 null rows \(the first is row 1\)"
    ):
        table_token_files(tmp_path / "n.arrow")


def test_a_list_view_of_ids_is_packed_as_the_lists_it_holds(tmp_path: Path) -> None:
    # A list_view of token ids is the column of token id lists, in a layout whose rows
    # are not one run: "name the column of token id lists with column=" sent the user
    # looking for another column; since 2026-12-07 it is packed row by row
    # (tests/formats/test_packed_views_s49.py).
    typ = pa.list_view(pa.int32())
    _write(tmp_path / "v.arrow", pa.table({"input_ids": pa.array([[1, 2], [3]] * 5, typ)}), 10)
    (f,) = table_token_files(tmp_path / "v.arrow")
    assert f.num_tokens == 15
