"""Columns whose names hold a dot beside a struct of the name before it (``answers.text``
and struct ``answers``: a ``datasets`` flatten() of some columns): a Parquet leaf's
dotted path names either, so each column's own leaves are found by their parts."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from headrace.errors import FormatError
from headrace.formats import Table, TableSource


def _texts(ragged: object) -> list[str]:
    values, offsets = ragged.values, ragged.offsets  # type: ignore[attr-defined]
    return [bytes(values[a:b]).decode() for a, b in pairwise(offsets)]


def test_a_dotted_column_is_not_refused_for_a_struct_fields_nulls(tmp_path: Path) -> None:
    # The flat column first: its leaf path 'answers.text' is the struct field's too, and
    # the field's row group statistics (4 nulls) refused the flat column at open.
    path = tmp_path / "flat.parquet"
    table = pa.table(
        {
            "answers.text": [f"flat{i}" for i in range(10)],
            "answers": [{"text": None if i % 3 == 0 else f"t{i}"} for i in range(10)],
        }
    )
    pq.write_table(table, path)
    src = TableSource(str(path), columns=["answers.text"], width=8, shuffle="none")
    out = src.read(0, np.arange(10, dtype=np.int64))
    values, mask = out["answers.text"], out["answers.text_mask"]
    assert [bytes(v[m]).decode() for v, m in zip(values, mask, strict=True)] == [
        f"flat{i}" for i in range(10)
    ]
    src.close()


def test_a_dotted_columns_nulls_are_still_refused_at_open(tmp_path: Path) -> None:
    path = tmp_path / "flat.parquet"
    table = pa.table(
        {
            "answers.text": [None if i == 4 else f"flat{i}" for i in range(10)],
            "answers": [{"text": f"t{i}"} for i in range(10)],
        }
    )
    pq.write_table(table, path)
    with pytest.raises(FormatError, match=r"column 'answers.text': row 4 is null"):
        TableSource(str(path), columns=["answers.text"], width=8, shuffle="none")


def test_dotted_columns_on_object_storage_fetch_their_own_chunks(tmp_path: Path) -> None:
    # A struct 'answers' beside columns 'answers.start' and 'answers.text': a leaf path
    # 'answers.start...' was taken for the struct's, so the column's chunks were not
    # fetched and pyarrow read them by a GET each (misses), a row group at a time.
    path = tmp_path / "flat.parquet"
    n = 300
    table = pa.table(
        {
            "answers": [{"text": f"t{i}", "start": i} for i in range(n)],
            "answers.start": pa.array([[i, i + 1] for i in range(n)], pa.list_(pa.int32())),
            "answers.text": [f"flat{i}" for i in range(n)],
        }
    )
    pq.write_table(table, path, row_group_size=100)
    rows = np.arange(0, n, 7)
    want = {"answers.text": [f"flat{i}" for i in rows], "answers.start": [[i, i + 1] for i in rows]}
    for where in (str(path), path.as_uri()):
        t = Table.open(where, columns=["answers.start", "answers.text"])
        out = t.read_rows(rows)
        assert _texts(out["answers.text"]) == want["answers.text"], where
        start = out["answers.start"]
        got = [start.values[a:b].tolist() for a, b in pairwise(start.offsets)]
        assert got == want["answers.start"], where
        assert t.misses == 0, where
        t.close()
