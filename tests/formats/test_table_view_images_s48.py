"""A ``datasets`` Image-like struct whose ``bytes`` are a ``binary_view`` (polars writes
bytes to IPC files as views): read as its bytes, as one of ``binary`` is."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from headrace.formats import Table


@pytest.mark.parametrize("kind", ["arrow", "parquet"])
def test_an_image_struct_of_binary_views_reads_as_its_bytes(tmp_path: Path, kind: str) -> None:
    # Refused before: "column 'img' has type struct<bytes: binary_view, ...>".
    img = pa.StructArray.from_arrays(
        [
            pa.array([b"\x01\x02", b"\x03" * 20, b""], pa.binary_view()),
            pa.array([None, None, None], pa.string_view()),
        ],
        names=["bytes", "path"],
    )
    table = pa.table({"img": img})
    path = tmp_path / f"t.{kind}"
    if kind == "parquet":
        pq.write_table(table, path)
    else:
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
            w.write_table(table)
    t = Table.open(str(path))
    got = t.read_rows(np.array([1, 2, 0]))["img"]
    assert got.values.tolist() == [3] * 20 + [1, 2]
    assert got.offsets.tolist() == [0, 20, 20, 22]
    t.close()
