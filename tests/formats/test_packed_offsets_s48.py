"""Damaged row offsets of a token-list column: named at open, never read as tokens."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from headrace.errors import FormatError
from headrace.formats import table_token_files


def _damaged(path: Path, patch: Callable[[np.ndarray], None]) -> Path:
    """100 rows of 3 int32 ids in one record batch, their row offsets patched."""
    table = pa.table({"input_ids": pa.array([[7, 8, 9]] * 100, pa.list_(pa.int32()))})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    body = bytearray(sink.getvalue())
    offsets = np.arange(0, 301, 3, dtype=np.int32)
    at = body.index(offsets.tobytes())
    patch(offsets)
    body[at : at + offsets.nbytes] = offsets.tobytes()
    path.write_bytes(body)
    return path


def test_row_offsets_that_go_down_are_named_with_their_row(tmp_path: Path) -> None:
    # Row 50's list "ends" before it starts: read as is, the document bounds went
    # back (position_ids of another row's tokens) or a batch failed on a bare
    # ValueError of mismatched shapes deep in the position code.
    for name, value, row, ends, starts in (("down", 5, 49, 5, 147), ("up", 290, 50, 153, 290)):
        path = _damaged(tmp_path / f"{name}.arrow", lambda o, v=value: o.__setitem__(50, v))
        with pytest.raises(
            FormatError,
            match=rf"{name}\.arrow: column 'input_ids'.s row offsets go down in record batch 0: "
            rf"row {row} ends at id {ends}, before it starts \(at {starts}\)",
        ):
            table_token_files(path)


def test_row_offsets_before_or_past_the_values_are_named(tmp_path: Path) -> None:
    # A negative first offset read 4 ids before the values (the offsets' own bytes)
    # as tokens; one past the end was blamed on compression.
    neg = _damaged(tmp_path / "neg.arrow", lambda o: o.__setitem__(0, -4))
    past = _damaged(tmp_path / "past.arrow", lambda o: o.__setitem__(100, 10**6))
    for path in (neg, past):
        with pytest.raises(
            FormatError,
            match=rf"{path.name}: column 'input_ids'.s row offsets run past its values in "
            r"record batch 0 \((-4 to 300|0 to 1000000) ids of 300 held\)",
        ):
            table_token_files(path)


def test_a_record_batch_of_no_rows_without_offsets_is_no_tokens(tmp_path: Path) -> None:
    # Arrow lets an empty list array leave its offsets buffer empty (pyarrow writes and
    # reads it so): it failed on a bare IndexError (offsets[-1] of no offsets).
    typ = pa.list_(pa.int32())
    schema = pa.schema({"input_ids": typ})
    empty = pa.ListArray.from_buffers(typ, 0, [None, None], children=[pa.array([], pa.int32())])
    rows = pa.array([[1, 2, 3], [4], [5, 6]] * 10, typ)
    path = tmp_path / "e.arrow"
    with pa.ipc.new_stream(str(path), schema) as w:
        for col in (rows, empty, rows):
            w.write_batch(pa.record_batch([col], schema=schema))
    (tf,) = table_token_files(path)
    want = np.concatenate([[1, 2, 3, 4, 5, 6] * 10] * 2)
    assert tf.num_tokens == want.size and tf.bounds is not None
    assert np.array_equal(tf.bounds, np.cumsum([0] + [3, 1, 2] * 20))
