"""Rows of lists of any length (``shapes={"negs": (None, None)}``): several token lists a
row, as a contrastive dataset's tokenized negatives (``Sequence(Sequence(Value("int32")))``)
or a conversation's turns. A :class:`Table` gives them as :class:`Nested`; a
:class:`TableSource` pads both levels, ``(B, lists, items)`` with a mask of that shape.
Until 2026-12-05 such a column was refused ("holds lists of lists")."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from headrace.errors import ConfigError, FormatError
from headrace.formats import Nested, Table, TableSource
from headrace.pipeline import Loader

datasets = pytest.importorskip("datasets")

N = 40
SHAPES = {"negs": (None, None)}


def _negatives(n: int = N) -> list[list[list[int]]]:
    """Row ``i``: 0 to 4 token lists of 1 to 8 ids."""
    rng = np.random.default_rng(21)
    return [
        [rng.integers(0, 1000, int(rng.integers(1, 9))).tolist() for _ in range(i % 5)]
        for i in range(n)
    ]


def _saved(tmp_path: Path, rows: list[object]) -> tuple[Path, Path]:
    """``rows`` as ``negs`` (``ds.map``'s lists of lists of int32) beside ``i``: a
    ``save_to_disk`` folder (2 shards) and a Parquet file (row groups of 16)."""
    features = datasets.Features(
        {
            "negs": datasets.Sequence(datasets.Sequence(datasets.Value("int32"))),
            "i": datasets.Value("int64"),
        }
    )
    ds = datasets.Dataset.from_dict({"negs": rows, "i": list(range(len(rows)))}, features)
    ds.save_to_disk(str(tmp_path / "ds"), num_shards=2)
    ds.to_parquet(str(tmp_path / "d.parquet"), batch_size=16)
    return tmp_path / "ds", tmp_path / "d.parquet"


def test_rows_of_lists_pad_at_both_levels(tmp_path: Path) -> None:
    rows = _negatives()
    for where in _saved(tmp_path, rows):  # type: ignore[arg-type]
        with Table.open(where, shapes=SHAPES) as tb:
            got = tb.read_rows(np.array([39, 0, 17, 33, 17]))["negs"]
            assert isinstance(got, Nested)
            for k, i in enumerate((39, 0, 17, 33, 17)):
                assert [x.tolist() for x in got.row(k)] == rows[i]
            copy = pickle.loads(pickle.dumps(tb))  # a worker's
            again = copy.read_rows([33])["negs"]
            np.testing.assert_array_equal(again.values, np.concatenate(got.row(3)))
            copy.close()
        src = TableSource(where, shapes=SHAPES, widths={"negs": (4, 8)}, pad_values={"negs": 7})
        assert src.fingerprint()["list_widths"] == {"negs": [4, 8]}
        with Loader(src, batch_size=8, seed=5) as ld:
            for _, b in zip(range(5), ld, strict=False):
                assert b["negs"].shape == b["negs_mask"].shape == (8, 4, 8)
                for r, i in enumerate(b["i"]):
                    want = np.full((4, 8), 7)
                    for j, ids in enumerate(rows[i]):
                        want[j, : len(ids)] = ids
                    np.testing.assert_array_equal(b["negs"][r], want)
                    assert b["negs_mask"][r].sum() == sum(map(len, rows[i]))
        src.close()


def test_a_row_past_the_widths_is_named_or_cut(tmp_path: Path) -> None:
    rows: list[object] = _negatives(20)
    rows[9] = [[1, 2, 3]] * 6  # 6 lists
    rows[14] = [[5] * 12]  # a list of 12 ids
    _, parquet = _saved(tmp_path, rows)
    src = TableSource(parquet, shapes=SHAPES, widths={"negs": (4, 8)}, shuffle="none")
    with pytest.raises(
        ConfigError,
        match=r"column 'negs': row 9 \(sample 9\) has 6 lists, more than 4 \(widths=\(4, 8\)\)",
    ):
        src.read(0, np.arange(20))
    with pytest.raises(
        ConfigError,
        match=r"row 14 \(sample 14\) has a list of 12 items \(list 0\), more than 8",
    ):
        src.read(0, np.arange(10, 20))
    with Table.open(parquet, shapes=SHAPES) as tb:  # a Table's Nested padded by hand
        nested = tb.read_rows([3, 9])["negs"]
        with pytest.raises(ConfigError, match=r"row 1 has 6 lists, more than 4; pass truncate"):
            nested.pad((4, 8))
        assert nested.pad((4, 8), truncate=True)[1][1].sum() == 12  # its first 4 lists of 3
    cut = TableSource(
        parquet, shapes=SHAPES, widths={"negs": (4, 8)}, truncate=True, shuffle="none"
    )
    b = cut.read(0, np.array([9, 14]))
    assert b["negs"][0].tolist() == [[1, 2, 3, 0, 0, 0, 0, 0]] * 4  # its first 4 lists
    assert b["negs"][1, 0].tolist() == [5] * 8 and b["negs_mask"][1].sum() == 8


def test_widths_and_shapes_that_do_not_fit_are_refused(tmp_path: Path) -> None:
    _, parquet = _saved(tmp_path, _negatives(8))  # type: ignore[arg-type]
    for kw, message in (
        ({"width": 8}, r"give it widths=\{'negs': \(lists, items\)\}.*\(got None, width=8\)"),
        ({"widths": {"negs": 8}}, r"give it widths=\{'negs': \(lists, items\)\}.*\(got 8\)"),
        ({"widths": {"negs": (4, 0)}}, r"widths of 'negs' must be an integer >= 1"),
        ({"widths": {"negs": (4, 8)}, "pad_side": "left"}, r"padded on the right only"),
        ({"widths": {"negs": (4, 8)}, "pad_values": {"negs": -1}, "vocab_size": 1000}, r"-1 is"),
    ):
        with pytest.raises(ConfigError, match=message):
            TableSource(parquet, shapes=SHAPES, **kw)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"or \(None, None\) for rows of lists"):
        Table.open(parquet, shapes={"negs": (None, 3, None)})  # type: ignore[dict-item]
    fixed = pa.table({"p": pa.array([[[1, 2, 3]]] * 4, pa.list_(pa.list_(pa.int16(), 3)))})
    pq.write_table(fixed, tmp_path / "p.parquet")
    with pytest.raises(ConfigError, match=r"holds lists of 3 items where shapes= gives \[None, N"):
        Table.open(tmp_path / "p.parquet", shapes={"p": (None, None)})


def test_null_lists_numbers_and_rows_are_named(tmp_path: Path) -> None:
    rows: list[object] = _negatives(30)
    rows[7] = [[1, 2], None]  # a null list
    rows[12] = [[1, None, 3]]  # a null id
    rows[21] = None  # a null row
    _, parquet = _saved(tmp_path, rows)
    src = TableSource(parquet, shapes=SHAPES, widths={"negs": (4, 8)}, shuffle="none")
    for row in (7, 12):  # (the row group's such rows named, the one read among them)
        with pytest.raises(
            FormatError, match=r"'negs': 2 row\(s\) hold null list items.*rows 7, 12"
        ):
            src.read(0, np.array([row]))
    with pytest.raises(FormatError, match=r"column 'negs': row 21 is null"):
        src.read(0, np.array([21]))
    others = np.array([r for r in range(30) if r not in (7, 12, 21)])
    assert src.read(0, others)["negs_mask"].shape == (others.size, 4, 8)


def test_an_id_outside_the_vocabulary_is_named_by_list_and_place(tmp_path: Path) -> None:
    rows: list[object] = _negatives(20)
    rows[13] = [[1, 2], [3, 4, 5000]]
    _, parquet = _saved(tmp_path, rows)
    src = TableSource(
        parquet, shapes=SHAPES, widths={"negs": (4, 8)}, vocab_size=1000, shuffle="none"
    )
    with pytest.raises(
        FormatError,
        match=r"column 'negs', row 13 \(sample 13\), position \[1, 2\]: token id 5000 is outside",
    ) as info:
        src.read(0, np.arange(20))
    assert "1 of its 5 ids are outside" in str(info.value)


@pytest.mark.parametrize("damage", ["inner", "outer"])
def test_damaged_offsets_are_corrupt_data(tmp_path: Path, damage: str) -> None:
    # Offsets written by hand into an Arrow file (its writer does not check their order):
    # a list of negative length is the file's damage, named as such, never numbers from
    # elsewhere in the column.
    values = pa.array(np.arange(24, dtype=np.int32))
    lists = np.arange(0, 25, 3, dtype=np.int32)  # 8 lists of 3 ids
    rows = np.arange(0, 9, 2, dtype=np.int32)  # 4 rows of 2 lists
    (lists if damage == "inner" else rows)[3] = 1
    inner = pa.ListArray.from_buffers(
        pa.list_(pa.int32()), 8, [None, pa.py_buffer(lists.tobytes())], children=[values]
    )
    outer = pa.ListArray.from_buffers(
        pa.list_(inner.type), 4, [None, pa.py_buffer(rows.tobytes())], children=[inner]
    )
    with pa.ipc.new_file(tmp_path / "dmg.arrow", pa.schema([("x", outer.type)])) as w:
        w.write_table(pa.table({"x": outer}))
    tb = Table.open(tmp_path / "dmg.arrow", shapes={"x": (None, None)})
    with pytest.raises(FormatError, match=r"dmg\.arrow: column 'x': corrupt data in record batch"):
        tb.read_rows([0])
