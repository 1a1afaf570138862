"""pad_batch as a contrastive (E5-style) user meets it (s51): what a table's rows of
token lists (``Nested``: several hard negatives a row) say when handed to it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from headrace.collate import pad_batch
from headrace.errors import ConfigError
from headrace.formats import Nested, Table


def test_a_tables_rows_of_token_lists_say_to_pad_them_with_nested_pad(tmp_path: Path) -> None:
    negs = [[[5, 6, 7], [8]], [], [[9, 10]]]  # 2, 0 and 1 hard negatives
    ids = pa.list_(pa.list_(pa.int32()))
    pq.write_table(pa.table({"neg_ids": pa.array(negs, ids)}), tmp_path / "t.parquet")
    with Table.open(tmp_path / "t.parquet", shapes={"neg_ids": (None, None)}) as tb:
        got = tb.read_rows(np.arange(3))["neg_ids"]
    assert isinstance(got, Nested)
    # Until 2026-12-07: TypeError "'Nested' object is not iterable", naming nothing.
    with pytest.raises(ConfigError, match=r"pad_batch.*Nested.*\.pad\(\(lists, items\)"):
        pad_batch(got, width=4)
    x, m = got.pad((2, 4))  # what the message names works
    want = np.zeros((3, 2, 4), np.int32)
    for i, row in enumerate(negs):
        for j, ids_ in enumerate(row):
            want[i, j, : len(ids_)] = ids_
    np.testing.assert_array_equal(x, want)
    np.testing.assert_array_equal(m, want != 0)
