"""A ``Ragged`` built from an Arrow list column (s56): Arrow's ``list`` offsets are
int32, and ``Ragged`` refused them ("offsets must be int64 (got int32)") without
saying what to do; they are widened now, which loses nothing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from headrace.errors import ConfigError
from headrace.formats import Ragged


def test_arrow_list_offsets_of_int32_are_taken(tmp_path: Path) -> None:
    rows = [[5, 6, 7], [], [8], [9, 10]]
    pq.write_table(pa.table({"ids": pa.array(rows, pa.list_(pa.int32()))}), tmp_path / "t.parquet")
    col = pq.read_table(tmp_path / "t.parquet")["ids"].combine_chunks().slice(1)
    assert col.offsets.type == pa.int32()
    r = Ragged(values=col.values.to_numpy(), offsets=col.offsets.to_numpy())
    assert r.offsets.dtype == np.int64 and r.offsets.tolist() == [3, 3, 4, 6]
    assert [r.row(i).tolist() for i in range(len(r))] == rows[1:]
    out, mask = r.pad(None, pad_value=-1)
    assert out.tolist() == [[-1, -1], [8, -1], [9, 10]]
    assert mask.sum() == 3


def test_offsets_of_another_dtype_are_told_how_to_cast(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        Ragged(values=np.arange(4), offsets=np.array([0, 1, 4], dtype=np.uint64))
    msg = str(info.value)
    assert "int64 (or int32)" in msg and "got uint64" in msg, msg
    assert "offsets.astype(np.int64)" in msg, msg
