"""Shards whose structs differ in what is not read: a struct's fields are read by name,
so their order, and fields that no column read names, may differ between files (records
written from JSON type a struct in the order its keys come, and a later shard may add a
field). What is read must still be the same type in every file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from headrace.errors import FormatError
from headrace.formats import Table


def _write(root: Path) -> None:
    root.mkdir()
    first = pa.array([{"a": 1, "b": "x"}, {"a": 2, "b": "y"}])
    later = pa.array([{"b": "z", "c": 0.5, "a": 3}, {"b": "w", "c": 1.5, "a": 4}])
    pq.write_table(pa.table({"meta": first, "i": [0, 1]}), root / "0.parquet")
    pq.write_table(pa.table({"meta": later, "i": [2, 3]}), root / "1.parquet")


def test_a_struct_field_read_from_shards_whose_structs_differ_elsewhere(tmp_path: Path) -> None:
    # Refused before: "schema differs ... column 'meta' is struct<b, c, a> here, ...".
    _write(tmp_path / "t")
    table = Table.open(str(tmp_path / "t"), columns=["meta.a", "meta.b", "i"])
    got = table.read_rows(np.array([3, 0, 2, 1]))
    assert got["meta.a"].tolist() == [4, 1, 3, 2]
    assert got["i"].tolist() == [3, 0, 2, 1]
    text = got["meta.b"]
    rows = [bytes(text.values[text.offsets[k] : text.offsets[k + 1]]) for k in range(4)]
    assert rows == [b"w", b"x", b"z", b"y"]
    table.close()


def test_an_image_struct_whose_fields_come_in_another_order(tmp_path: Path) -> None:
    root = tmp_path / "t"
    root.mkdir()
    ab = pa.array([{"bytes": b"\x01\x02", "path": None}])
    ba = pa.array([{"path": None, "bytes": b"\x03"}])
    pq.write_table(pa.table({"img": ab}), root / "0.parquet")
    pq.write_table(pa.table({"img": ba}), root / "1.parquet")
    table = Table.open(str(root))
    got = table.read_rows(np.array([1, 0]))["img"]
    assert got.values.tolist() == [3, 1, 2] and got.offsets.tolist() == [0, 1, 3]
    table.close()


def test_a_struct_field_of_another_type_is_still_refused(tmp_path: Path) -> None:
    root = tmp_path / "t"
    root.mkdir()
    pq.write_table(pa.table({"meta": pa.array([{"a": 1, "b": 2}])}), root / "0.parquet")
    pq.write_table(pa.table({"meta": pa.array([{"b": 2.5, "a": 1}])}), root / "1.parquet")
    Table.open(str(root), columns=["meta.a"]).close()  # 'b' is not read
    with pytest.raises(FormatError, match=r"1\.parquet: schema differs .*'meta\.b' is double"):
        Table.open(str(root), columns=["meta.b"])


def test_a_struct_field_missing_from_a_shard_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "t"
    root.mkdir()
    pq.write_table(pa.table({"meta": pa.array([{"a": 1, "b": 2}])}), root / "0.parquet")
    pq.write_table(pa.table({"meta": pa.array([{"a": 1}])}), root / "1.parquet")
    with pytest.raises(FormatError, match=r"1\.parquet: schema differs .*lacks column 'meta\.b'"):
        Table.open(str(root), columns=["meta.b"])
