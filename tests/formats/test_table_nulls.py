"""Null rows refused with what a user cleaning the data needs: for every column that
has some, how many, the first few (bounded), and the files that hold them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from headrace.errors import FormatError
from headrace.formats import Table, TableSource
from headrace.formats._table_nulls import MAX_NAMED_NULLS


def _stream(path: Path, table: pa.Table, chunk: int) -> None:
    with pa.OSFile(str(path), "wb") as f, pa.ipc.new_stream(f, table.schema) as w:
        w.write_table(table, max_chunksize=chunk)


def _save_to_disk(root: Path, shards: list[pa.Table]) -> None:
    """The layout datasets' save_to_disk writes: IPC stream shards and state.json."""
    root.mkdir()
    files = []
    for k, t in enumerate(shards):
        name = f"data-{k:05d}-of-{len(shards):05d}.arrow"
        _stream(root / name, t, chunk=100)
        files.append({"filename": name})
    (root / "state.json").write_text(json.dumps({"_data_files": files, "_fingerprint": "f"}))
    (root / "dataset_info.json").write_text("{}")


def _rows(message: str, column: str) -> list[int]:
    m = re.search(rf"column '{column}': [\d,]+ rows are null[^:]*: rows ([\d, ]+)", message)
    assert m, message
    return [int(r) for r in m.group(1).split(", ") if r]


def test_every_null_row_is_counted_and_the_first_few_named_per_column(tmp_path: Path) -> None:
    # Fails before: "n.arrow: column 'ids': row 13 is null", and nothing of the 100
    # other null rows of 'ids', nor of 'label''s: one rerun per row to clean the data.
    n = 10_000
    ids = pa.array([None if i % 97 == 13 else [1, 2] for i in range(n)], pa.list_(pa.int32()))
    label = pa.array([None if i % 1000 == 7 else 1 for i in range(n)], pa.int64())
    t = pa.table({"ids": ids, "label": label, "ok": pa.array(range(n))})
    _stream(tmp_path / "n.arrow", t, chunk=1000)
    pq.write_table(t.drop_columns(["ids"]), tmp_path / "n.parquet", row_group_size=1000)
    want_ids = [i for i in range(n) if i % 97 == 13]
    want_label = [i for i in range(n) if i % 1000 == 7]
    with pytest.raises(FormatError) as err:
        TableSource(tmp_path / "n.arrow", columns=["ids", "label", "ok"], width=4)
    msg = str(err.value)
    assert msg.startswith(f"{tmp_path / 'n.arrow'}: column 'ids': {len(want_ids)} rows are null")
    assert _rows(msg, "ids") == want_ids[:MAX_NAMED_NULLS]
    assert "column 'label': 10 rows are null" in msg
    assert _rows(msg, "label") == want_label
    assert "ds.filter(lambda r: r['ids'] is not None and r['label'] is not None)" in msg
    assert "leave the columns out" in msg
    # Parquet: the statistics count a number column's nulls; the groups are decoded to
    # name rows only while fewer than MAX_NAMED_NULLS are named.
    tb = Table.open(tmp_path / "n.parquet")
    with pytest.raises(FormatError, match=r"n\.parquet: column 'label': 10 rows are null: rows 7,"):
        tb.refuse_nulls(["label", "ok"])
    assert tb.decoded == MAX_NAMED_NULLS
    # One null row reads as before.
    one = pa.table({"x": pa.array([1, None, 3])})
    _stream(tmp_path / "one.arrow", one, chunk=2)
    with pytest.raises(FormatError, match=r"one\.arrow: column 'x': row 1 is null; headrace does"):
        TableSource(tmp_path / "one.arrow")


def test_nulls_across_shards_name_the_files_and_where_the_first_lies(tmp_path: Path) -> None:
    shards = [
        pa.table({"label": pa.array([None if k >= 2 and i % 100 == k else k for i in range(1000)])})
        for k in range(8)
    ]
    _save_to_disk(tmp_path / "ds", shards)
    with pytest.raises(FormatError) as err:
        TableSource(tmp_path / "ds")
    msg = str(err.value)
    assert msg.startswith(f"{tmp_path / 'ds' / 'data-00002-of-00008.arrow'}: column 'label': 60 ")
    assert _rows(msg, "label") == [2002 + 100 * j for j in range(MAX_NAMED_NULLS)]
    assert "(table rows; the first is row 2 of data-00002-of-00008.arrow)" in msg
    assert "6 files hold them (data-00002-of-00008.arrow: 10, " in msg
    assert "data-00006-of-00008.arrow: 10, and 1 more)" in msg


def test_a_parquet_list_column_counts_the_nulls_of_the_row_group_read(tmp_path: Path) -> None:
    # A list's statistics count empty lists with its nulls: its null rows are found as
    # row groups are read, and the error counts those of the row group at hand.
    n = 6000
    ids = pa.array([None if i % 97 == 13 else [1] for i in range(n)], pa.list_(pa.int32()))
    pq.write_table(pa.table({"ids": ids}), tmp_path / "l.parquet", row_group_size=2000)
    tb = Table.open(tmp_path / "l.parquet")
    tb.refuse_nulls(["ids"])
    want = [i for i in range(2000, 4000) if i % 97 == 13]
    with pytest.raises(FormatError) as err:
        tb.read_rows([2500, 2050])  # 2050 = 21 * 97 + 13
    msg = str(err.value)
    assert f"column 'ids': {len(want)} rows are null in row group 1, rows [2000, 4000)" in msg
    assert _rows(msg, "ids") == want[:MAX_NAMED_NULLS]
    assert "other row groups are checked as they are read" in msg
    # The row read is named even past the first few of its group.
    later = [i for i in want if i > want[MAX_NAMED_NULLS - 1]]
    with pytest.raises(FormatError) as err:
        tb.read_rows([later[0]])
    assert _rows(str(err.value), "ids")[-1] == later[0]
    assert np.array_equal(tb.read_rows([2500])["ids"].values, [1])
    # One null row in its group: said to be the only one there, not in the table.
    ids = pa.array([None if i == 1500 else [1] for i in range(3000)], pa.list_(pa.int32()))
    pq.write_table(pa.table({"ids": ids}), tmp_path / "one.parquet", row_group_size=1000)
    with pytest.raises(
        FormatError,
        match=r"row 1500 is null, the only one in row group 1, rows \[1000, 2000\) of the "
        r"table; other row groups are checked as they are read; headrace does not",
    ):
        Table.open(tmp_path / "one.parquet").read_rows([1500])


def test_null_list_items_in_arrow_files_are_refused_at_open(tmp_path: Path) -> None:
    # Fails before: opened, and refused only when a read reached the record batch, hours
    # into an epoch. The record batch header counts the list's null items: no read where
    # there are none.
    root = tmp_path / "saved"
    shard = pa.table(
        {
            "ids": pa.array(
                [[i, None] if i in (7, 250, 251) else [i] for i in range(300)], pa.list_(pa.int64())
            ),
            "vec": pa.array(
                [[i, None] if i == 120 else [i, 1] for i in range(300)], pa.list_(pa.int64(), 2)
            ),
            "fine": pa.array([[i] for i in range(300)], pa.list_(pa.int64())),
        }
    )
    _save_to_disk(root, [shard.slice(0, 200), shard.slice(200)])
    with pytest.raises(FormatError) as info:
        TableSource(root, columns=["ids", "vec"], width=2)
    message = str(info.value)
    assert "column 'ids': 3 row(s) hold null list items: rows 7, 250, 251 (2 files hold them)" in (
        message
    )
    assert "column 'vec': 1 row(s) hold null list items: rows 120" in message
    assert "data-00000-of-00002.arrow" in message and "None not in r['ids']" in message
    # Columns without any, and rows around them, read as before.
    src = TableSource(root, columns=["fine"], width=1, shuffle=False)
    assert src.read(0, np.arange(300))["fine"].ravel().tolist() == list(range(300))


def test_null_list_items_in_parquet_are_found_as_their_row_groups_are_read(
    tmp_path: Path,
) -> None:
    # A Parquet list's statistics count empty lists, null rows and null items as one:
    # telling them apart at open would decode the column (docs/formats.md). Read, the row
    # group is refused by row.
    t = pa.table({"x": pa.array([[1, None] if i == 13 else [i] for i in range(40)])})
    path = tmp_path / "n.parquet"
    pq.write_table(t, path, row_group_size=10)
    src = TableSource(path, width=2, shuffle=False)
    assert src.read(0, np.arange(10))["x"].shape == (10, 2)
    with pytest.raises(
        FormatError,
        match=r"n\.parquet: column 'x': 1 row\(s\) hold null list items "
        r"in .*: rows 13\b",
    ):
        src.read(0, np.arange(10, 20))


@pytest.mark.parametrize("kind", ["ragged", "fixed"])
def test_a_row_with_null_list_items_fails_alone_not_its_row_group(
    tmp_path: Path, kind: str
) -> None:
    # Before: every row of row group 1 (rows 10-19) was refused for row 13's null item.
    typ = pa.list_(pa.int64()) if kind == "ragged" else pa.list_(pa.int64(), 2)
    clean = [[i, i + 1] for i in range(40)]
    bad = [[13, None] if i == 13 else r for i, r in enumerate(clean)]
    for name, rows in (("bad", bad), ("clean", clean)):
        t = pa.table({"x": pa.array(rows, typ), "y": pa.array(range(40))})
        pq.write_table(t, tmp_path / f"{name}.parquet", row_group_size=10)
    srcs = {
        n: TableSource(tmp_path / f"{n}.parquet", width=2, shuffle=False) for n in ("bad", "clean")
    }
    others = np.array([r for r in range(40) if r != 13], dtype=np.int64)
    got, want = srcs["bad"].read(0, others), srcs["clean"].read(0, others)
    assert got.keys() == want.keys()
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])
    with pytest.raises(FormatError) as info:
        srcs["bad"].read(0, np.array([12, 13], dtype=np.int64))
    assert str(info.value).startswith(
        f"{tmp_path / 'bad.parquet'}: column 'x': 1 row(s) hold null list items in row group "
        "1, rows [10, 20) of the table: rows 13; the row group's other rows read as usual; "
    )
    assert "fill or drop them before reading" in str(info.value)
    assert srcs["bad"].read(0, np.array([14], dtype=np.int64))["y"].tolist() == [14]


def test_the_example_filter_names_the_column_that_holds_null_items(tmp_path: Path) -> None:
    # Until 2026-12-05 it named the first column read ('a', which has none).
    t = pa.table(
        {
            "a": pa.array([[1, 2]] * 4, pa.list_(pa.int32())),
            "b": pa.array([[1], [2, None], [3], [4]], pa.list_(pa.int32())),
        }
    )
    with pa.ipc.new_file(tmp_path / "t.arrow", t.schema) as w:
        w.write_table(t)
    with pytest.raises(FormatError, match=r"column 'b': 1 row\(s\) hold null list items") as info:
        TableSource(tmp_path / "t.arrow", columns=["a", "b"], width=4)
    assert "None not in r['b']" in str(info.value), info.value
