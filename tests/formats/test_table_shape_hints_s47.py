"""A column of fixed-size lists of lists: the refusal suggests only shapes that open it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from headrace.errors import ConfigError, FormatError
from headrace.formats import Table


def test_fixed_size_lists_of_lists_are_not_told_to_take_a_first_dimension_none(
    tmp_path: Path,
) -> None:
    rows = [[[i, i + 1, i + 2], [i] * 3] for i in range(6)]
    typ = pa.list_(pa.list_(pa.int32()), 2)  # two lists of any length a row
    path = tmp_path / "fl.parquet"
    pq.write_table(pa.table({"fl": pa.array(rows, typ)}), path)
    with pytest.raises(FormatError, match=r"shapes=\{'fl': \(2, 3\)\}") as caught:
        Table.open(path)
    # Every row holds 2 lists: (None, 3), which the refusal suggested, is itself refused.
    assert "(None," not in str(caught.value)
    with pytest.raises(ConfigError, match=r"holds lists of 2 items where shapes= gives"):
        Table.open(path, shapes={"fl": (None, 3)})
    out = Table.open(path, shapes={"fl": (2, 3)}).read_rows([5, 0])["fl"]
    np.testing.assert_array_equal(out, np.array([rows[5], rows[0]], np.int32))
