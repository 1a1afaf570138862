"""Columns of a Parquet row group read in sub-windows (``Table.split_groups``): a
sub-window that starts inside one of the stream's decoded batches is a slice of it,
whose arrays start at an offset; each read as pyarrow reads the same rows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from headrace.formats import Table

N = 20


def _objects_file(tmp_path: Path) -> tuple[Path, list[object]]:
    """One row group of ``N`` rows of datasets' List({"a", "b"}) (row 18 null) beside
    1 MB of zeros a row, so that the group streams in batches of 4 rows: the last
    sub-window of 6 ([18, 20)) is the end of the batch [16, 20)."""
    objs: list[object] = [[{"a": i, "b": float(i)}] * (1 + i % 3) for i in range(N)]
    objs[18] = None
    item = pa.struct([("a", pa.int64()), ("b", pa.float32())])
    table = pa.table(
        {
            "objects": pa.array(objs, pa.list_(item)),
            "i": np.arange(N),
            "pad": pa.array([bytes(1_000_000)] * N),
        }
    )
    path = tmp_path / "objs.parquet"
    pq.write_table(table, path, row_group_size=N, compression="zstd", use_dictionary=False)
    return path, objs


@pytest.mark.parametrize("remote", [False, True])  # (a file:// URL: read by ranges)
def test_a_field_of_a_list_of_structs_in_a_sliced_sub_window(tmp_path: Path, remote: bool) -> None:
    # pyarrow's ListArray.from_arrays refuses a mask beside sliced offsets: the rows of
    # the sub-window after a null list failed with ArrowNotImplementedError.
    path, objs = _objects_file(tmp_path)
    table = Table.open(path.as_uri() if remote else str(path), columns=["objects.a", "i"])
    table.split_groups(6)
    table.read_rows([13], ["objects.a", "i"])  # the stream, in batches of 4, is at row 18
    got = table.read_rows([19], ["objects.a", "i"])
    assert got["i"].tolist() == [19]
    want = [o["a"] for o in objs[19]]  # type: ignore[index]
    assert got["objects.a"].values.tolist() == want
    assert got["objects.a"].offsets.tolist() == [0, len(want)]
    table.close()
