"""A list_view column of token ids packed (s49): each row's ids, in row order, wherever
they lie in the values (out of order, overlapping, sliced), as TableSource reads them.
Refused before, with advice (pyarrow's table.cast() to a list) that fails on such a view
in pyarrow 26, and whose array-level cast builds an invalid array."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from headrace.errors import FormatError
from headrace.formats import TokenSource, table_token_files

L = 4


def _views(offsets: list[int], sizes: list[int], n: int, large: bool = False) -> pa.Array:
    width = pa.int64() if large else pa.int32()
    kind = pa.LargeListViewArray if large else pa.ListViewArray
    values = pa.array(np.arange(100, 100 + n, dtype=np.int32))
    return kind.from_arrays(pa.array(offsets, width), pa.array(sizes, width), values)


def _write(path: Path, batches: list[pa.RecordBatch], stream: bool = False) -> Path:
    new = pa.ipc.new_stream if stream else pa.ipc.new_file
    with new(str(path), batches[0].schema) as w:
        for b in batches:
            w.write_batch(b)
    return path


def _batch(arr: pa.Array) -> pa.RecordBatch:
    return pa.record_batch({"text": [f"r{i}" for i in range(len(arr))], "input_ids": arr})


def _check_stream(path: Path, rows: list[list[int]]) -> None:
    """``path`` packs as ``rows`` one after another, a document a row (empty rows none)."""
    want = np.array([t for r in rows for t in r], np.int32)
    (tf,) = table_token_files(path)
    assert tf.num_tokens == want.size and tf.dtype == np.int32
    assert tf.bounds is not None
    starts = np.concatenate([[0], np.cumsum([len(r) for r in rows])])
    assert tf.bounds.tolist() == [*starts[:-1].tolist(), want.size]
    src = TokenSource([tf], context=L, window_bytes=4096, block_bytes=4096, positions="documents")
    samples = np.arange(src.samples_per_epoch, dtype=np.int64)
    got = src.read(1, samples)
    _, at = src.starts(1, samples)
    assert np.array_equal(got["x"], want[at[:, None] + np.arange(L)])
    assert np.array_equal(got["y"], want[at[:, None] + np.arange(1, L + 1)])
    src.close()


@pytest.mark.parametrize("large", [False, True])
@pytest.mark.parametrize("stream", [False, True])
def test_out_of_order_and_overlapping_views_pack_their_rows_in_row_order(
    tmp_path: Path, large: bool, stream: bool
) -> None:
    # Rows [6..9], [0..2], [3..5] (out of order), [2..4] (overlapping), [] and [7..8].
    offsets, sizes = [6, 0, 3, 2, 9, 7], [4, 3, 3, 3, 0, 2]
    arr = _views(offsets, sizes, 10, large)
    table = pa.Table.from_batches([_batch(arr)])
    # pyarrow's table cast (the refusal's advice before) fails on it.
    with pytest.raises(pa.ArrowInvalid):
        table.cast(pa.schema([("text", pa.string()), ("input_ids", pa.list_(pa.int32()))]))
    rows = arr.to_pylist()
    path = _write(
        tmp_path / "v.arrow", [_batch(arr), _batch(_views([1, 0], [2, 5], 8, large))], stream
    )
    _check_stream(path, [*rows, [101, 102], [100, 101, 102, 103, 104]])


def test_a_sliced_view_packs_its_own_rows(tmp_path: Path) -> None:
    arr = _views([0, 2, 4, 6, 8], [2, 2, 2, 2, 2], 10).slice(1, 3)  # rows [2,3] [4,5] [6,7]
    path = _write(tmp_path / "s.arrow", [_batch(arr)])
    _check_stream(path, arr.to_pylist())
    # Rows one after another in the values are one range of the file (one read).
    (tf,) = table_token_files(path)
    assert tf.segments is not None and len(tf.segments) == 1


def test_a_view_row_past_its_values_is_refused_naming_the_row(tmp_path: Path) -> None:
    # A damaged size: read as it is, the bytes after the values were tokens.
    arr = _views([0, 2, 4], [2, 2, 2], 6)
    path = _write(tmp_path / "d.arrow", [_batch(arr)])
    raw = bytearray(path.read_bytes())
    sizes = np.array([2, 2, 2], np.int32).tobytes()
    at = raw.find(sizes)
    assert at > 0 and raw.find(sizes, at + 1) < 0
    raw[at + 8 : at + 12] = np.int32(50).tobytes()  # row 2: 50 ids from id 4
    path.write_bytes(bytes(raw))
    with pytest.raises(FormatError, match=r"d\.arrow: column 'input_ids''s row 2 .*\[4, 54\)"):
        table_token_files(path)
