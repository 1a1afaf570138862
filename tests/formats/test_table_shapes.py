"""Columns of nested lists read as ``(B, *shape)`` with ``shapes=``: what ``ds.map`` saves of
a feature extractor's output (Whisper's ``input_features``, an image processor's
``pixel_values``: ``Sequence(Sequence(Value("float32")))``, lists of lists with no shape
in the schema), and flat lists of one length (embeddings). Until 2026-12-04 a list of
lists was refused ("cannot turn into arrays") and a flat list came out padded, with a
mask."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from headrace.errors import ConfigError, FormatError
from headrace.formats import Table, TableSource
from headrace.pipeline import Loader

datasets = pytest.importorskip("datasets")

N = 50
SHAPES = {"input_features": (4, 6), "pixel_values": (3, 2, 2), "emb": (8,)}


def _saved(tmp_path: Path) -> tuple[dict[str, np.ndarray], Path, Path]:
    """A datasets Dataset of nested float lists, saved (3 Arrow shards) and as Parquet
    (row groups of 16): its arrays, and both paths."""
    rng = np.random.default_rng(3)
    arrays = {c: rng.random((N, *s)).astype(np.float32) for c, s in SHAPES.items()}
    arrays["label"] = np.arange(N)
    ds = datasets.Dataset.from_dict({c: [r.tolist() for r in a] for c, a in arrays.items()})
    # As ds.map(feature_extractor) leaves it: lists of lists of float32, no shape.
    ds = ds.cast(
        datasets.Features(
            {
                "input_features": datasets.Sequence(datasets.Sequence(datasets.Value("float32"))),
                "pixel_values": datasets.Sequence(
                    datasets.Sequence(datasets.Sequence(datasets.Value("float32")))
                ),
                "emb": datasets.Sequence(datasets.Value("float32")),
                "label": datasets.Value("int64"),
            }
        )
    )
    ds.save_to_disk(str(tmp_path / "ds"), num_shards=3)
    ds.to_parquet(str(tmp_path / "d.parquet"), batch_size=16)
    return arrays, tmp_path / "ds", tmp_path / "d.parquet"


def test_nested_lists_read_as_the_shapes_given_from_arrow_and_parquet(tmp_path: Path) -> None:
    arrays, saved, parquet = _saved(tmp_path)
    idx = np.array([49, 0, 17, 33, 16, 16])
    for where in (saved, parquet):
        tb = Table.open(where, shapes=SHAPES)
        got = tb.read_rows(idx)
        for c, s in SHAPES.items():
            assert got[c].shape == (idx.size, *s) and got[c].dtype == np.float32, c
            np.testing.assert_array_equal(got[c], arrays[c][idx])
        assert tb.shapes == SHAPES
        copy = pickle.loads(pickle.dumps(tb))  # a worker's: the same shapes
        np.testing.assert_array_equal(copy.read_rows(idx)["pixel_values"], got["pixel_values"])
        copy.close()
        tb.close()
        src = TableSource(where, shapes=SHAPES, shuffle="full")
        assert src.fingerprint()["shapes"] == {c: list(s) for c, s in SHAPES.items()}
        assert "emb_mask" not in src.read(0, np.arange(4))  # one length: no padding
        with Loader(src, batch_size=8, seed=1) as ld:
            for _, b in zip(range(8), ld, strict=False):
                for c in SHAPES:
                    np.testing.assert_array_equal(b[c], arrays[c][b["label"]])
        src.close()


def test_without_a_shape_a_list_of_lists_says_how_to_give_one(tmp_path: Path) -> None:
    _, saved, parquet = _saved(tmp_path)
    for where in (saved, parquet):
        # Local files: the first row's shape suggested, read from it.
        with pytest.raises(
            FormatError,
            match=r"column 'pixel_values' holds lists of lists \(list<.*\), whose shape the "
            r"schema does not give: where every row has one, read it as \(B, 3, 2, 2\) "
            r"with shapes=\{'pixel_values': \(3, 2, 2\)\} \(the first row's shape\)",
        ):
            Table.open(where, columns=["pixel_values"])
    rows = [[[1, 2, 3]] * 2] * 4
    pq.write_table(
        pa.table({"pts": pa.array(rows, pa.list_(pa.list_(pa.int16(), 3)))}), tmp_path / "p.parquet"
    )
    # Lists of fixed-size lists: rows of items of (3,) (test_table_items.py), unless a
    # shape says every row has 2.
    assert Table.open(tmp_path / "p.parquet").columns["pts"].item_shape == (3,)
    # Rows of no shape to suggest (a first row holding an empty list): the levels named.
    empty = [[[]] * 2] * 4
    pq.write_table(
        pa.table({"e": pa.array(empty, pa.list_(pa.list_(pa.int16())))}), tmp_path / "e.parquet"
    )
    with pytest.raises(FormatError, match=r"with shapes=\{'e': \(d0, d1\)\} \(each row"):
        Table.open(tmp_path / "e.parquet")
    tb = Table.open(tmp_path / "p.parquet", shapes={"pts": (2, 3)})
    np.testing.assert_array_equal(tb.read_rows([3, 0])["pts"], np.array(rows[:2], np.int16))


@pytest.mark.parametrize("suffix", [".parquet", ".arrow"])
def test_fixed_size_lists_of_fixed_size_lists_read_as_the_shape_their_schema_gives(
    suffix: str, tmp_path: Path
) -> None:
    # fixed_size_list<fixed_size_list<float>[3]>[2]: (B, 2, 3) with no shapes= (until
    # 2026-12-06 refused as a shape "the schema does not give", asking for one).
    x = np.arange(N * 6, dtype=np.float32).reshape(N, 2, 3)
    t = pa.table({"c": pa.array(x.tolist(), pa.list_(pa.list_(pa.float32(), 3), 2))})
    path = tmp_path / f"f{suffix}"
    if suffix == ".parquet":
        pq.write_table(t, path, row_group_size=16)
    else:
        with pa.ipc.new_file(path, t.schema) as w:
            w.write_table(t, max_chunksize=16)
    src = TableSource(path, shuffle="none")
    got = src.read(0, np.arange(N))["c"]
    assert got.shape == (N, 2, 3) and got.dtype == np.float32
    np.testing.assert_array_equal(got, x)
    src.close()


def _varying(tmp_path: Path, arrow: bool) -> Path:
    """Rows of shape (2, 3) but row 13's outer list (3 lists) and row 27's inner one (2
    numbers); row groups / record batches of 10 rows."""
    rows = [np.full((2, 3), i, np.float32).tolist() for i in range(30)]
    rows[13] = np.full((3, 3), 13, np.float32).tolist()
    rows[27][1] = [27.0, 27.0]
    t = pa.table({"x": pa.array(rows, pa.list_(pa.list_(pa.float32()))), "i": range(30)})
    if arrow:
        path = tmp_path / "bad.arrow"
        with pa.ipc.new_file(path, t.schema) as w:
            for b in t.to_batches(max_chunksize=10):
                w.write_batch(b)
    else:
        path = tmp_path / "bad.parquet"
        pq.write_table(t, path, row_group_size=10)
    return path


@pytest.mark.parametrize("arrow", [False, True], ids=["parquet", "arrow"])
def test_a_row_of_another_shape_is_named_and_the_others_read(tmp_path: Path, arrow: bool) -> None:
    path = _varying(tmp_path, arrow)
    tb = Table.open(path, shapes={"x": (2, 3)})
    # Every other row reads, those beside the misshapen ones too (their lists are found
    # by their offsets, not by counting rows of the shape).
    others = np.array([r for r in range(30) if r not in (13, 27)])
    got = tb.read_rows(others)["x"]
    np.testing.assert_array_equal(got, np.array([np.full((2, 3), r) for r in others]))
    name = path.name.replace(".", r"\.")
    what = "record batch" if arrow else "row group"
    for row, has, dim in ((13, "a list of 3", 2), (27, "a list of 2", 3)):
        span = row // 10 * 10
        with pytest.raises(
            FormatError,
            match=rf"{name}: column 'x': row {row} does not have the column's shape \[2, 3\]: "
            rf"{has} where {dim} belong \(1 such row\(s\) in {what} {row // 10}, rows "
            rf"\[{span}, {span + 10}\) of the table: rows {row}; the {what}'s other rows",
        ):
            tb.read_rows([span, row])
    tb.close()


def test_a_null_list_inside_a_row_is_named_and_the_others_read(tmp_path: Path) -> None:
    rows: list[object] = [np.full((2, 3), i, np.float32).tolist() for i in range(20)]
    rows[4][1] = None  # type: ignore[index]
    rows[5] = None  # a null row: refused as null rows are
    pq.write_table(
        pa.table({"x": pa.array(rows, pa.list_(pa.list_(pa.float32())))}), tmp_path / "n.parquet"
    )
    tb = Table.open(tmp_path / "n.parquet", shapes={"x": (2, 3)})
    others = np.array([r for r in range(20) if r not in (4, 5)])
    np.testing.assert_array_equal(
        tb.read_rows(others)["x"], np.array([np.full((2, 3), r) for r in others])
    )
    message = r"column 'x': row 4 does not have the column's shape \[2, 3\]: a null list where 3"
    with pytest.raises(FormatError, match=message):
        tb.read_rows([4])
    with pytest.raises(FormatError, match=r"column 'x': row 5 is null"):
        tb.read_rows([5])


def test_shapes_that_do_not_fit_the_column_are_refused_when_it_opens(tmp_path: Path) -> None:
    _, _, parquet = _saved(tmp_path)
    cols = ["input_features", "label"]
    bad: list[tuple[object, str]] = [
        ("x", r"shapes must map column names to shapes"),
        ({"input_features": (4, 0)}, r"shapes\['input_features'\] must be a tuple of 1 to 5"),
        ({"input_features": (1,) * 6}, r"1 to 5 dimensions"),
        ({"input_features": (True, 6)}, r"1 to 5 dimensions"),
        ({"input_features": 24}, r"1 to 5 dimensions"),
        (
            {"input_features": (4, 6), "emb": (8,)},
            r"shapes= names column\(s\) \['emb'\] that "
            r"are not read; reading \['input_features', 'label'\]",
        ),
        (
            {"input_features": (24,)},
            r"column 'input_features' \(list<.*\) is 2 level\(s\) of "
            r"lists; shapes= gives it \[24\], 1 dimension\(s\)",
        ),
        (
            {"input_features": (4, 6), "label": (1,)},
            r"shapes= names column 'label' of type "
            r"int64; a shape is given to lists of numbers or bools",
        ),
    ]
    for shapes, message in bad:
        with pytest.raises(ConfigError, match=message):
            Table.open(parquet, columns=cols, shapes=shapes)  # type: ignore[arg-type]
    rows = [[[1, 2, 3]] * 2] * 4
    pq.write_table(
        pa.table({"pts": pa.array(rows, pa.list_(pa.list_(pa.int16(), 3)))}), tmp_path / "p.parquet"
    )
    with pytest.raises(ConfigError, match=r"holds lists of 3 items where shapes= gives \[2, 4\]"):
        Table.open(tmp_path / "p.parquet", shapes={"pts": (2, 4)})
    with (
        Table.open(parquet, columns=["label"]) as tb,
        pytest.raises(
            ConfigError, match=r"shapes= is given to Table.open\(\.\.\., shapes=\.\.\.\)"
        ),
    ):
        TableSource(tb, shapes={"input_features": (4, 6)})


def test_a_datasets_array_of_a_varying_first_dimension_takes_a_shape(tmp_path: Path) -> None:
    meta = {
        b"ARROW:extension:metadata": b'[[null, 3], "float32"]',
        b"ARROW:extension:name": b"datasets.features.features.Array2DExtensionType",
    }
    field = pa.field("x", pa.list_(pa.list_(pa.float32())), metadata=meta)
    rows = [np.full((2, 3), i, np.float32).tolist() for i in range(12)]
    table = pa.table({"x": pa.array(rows, field.type)}, schema=pa.schema([field]))
    pq.write_table(table, tmp_path / "dyn.parquet")
    # Without a shape: rows of items of (3,) (test_table_items.py).
    assert Table.open(tmp_path / "dyn.parquet").columns["x"].item_shape == (3,)
    got = Table.open(tmp_path / "dyn.parquet", shapes={"x": (2, 3)}).read_rows([11, 4])["x"]
    np.testing.assert_array_equal(got, np.array([np.full((2, 3), r) for r in (11, 4)]))
    with pytest.raises(ConfigError, match=r"Array2D feature of shape \[None, 3\]; shapes= gives"):
        Table.open(tmp_path / "dyn.parquet", shapes={"x": (2, 4)})


def test_null_rows_and_items_of_a_shaped_column_are_refused(tmp_path: Path) -> None:
    rows: list[object] = [np.full((2, 3), i, np.float32).tolist() for i in range(20)]
    rows[13][1][2] = None  # type: ignore[index]
    pq.write_table(
        pa.table({"x": pa.array(rows, pa.list_(pa.list_(pa.float32())))}),
        tmp_path / "items.parquet",
        row_group_size=10,
    )
    tb = Table.open(tmp_path / "items.parquet", shapes={"x": (2, 3)})
    assert tb.read_rows([12, 14])["x"].shape == (2, 2, 3)  # its span's other rows read
    with pytest.raises(FormatError, match=r"column 'x': 1 row\(s\) hold null list items.*rows 13"):
        tb.read_rows([13])
    rows[13] = None
    pq.write_table(
        pa.table({"x": pa.array(rows, pa.list_(pa.list_(pa.float32())))}),
        tmp_path / "rows.parquet",
        row_group_size=10,
    )
    with pytest.raises(FormatError, match=r"rows\.parquet: column 'x': row 13 is null"):
        TableSource(tmp_path / "rows.parquet", shapes={"x": (2, 3)}).read(0, np.arange(20))


def test_a_check_names_each_misshapen_row_and_no_other(tmp_path: Path) -> None:
    # Refused span by span (as until 2026-12-05), a check's halving found every row of
    # the two row groups (128 "problems", past its limit of 100) for two bad rows.
    from headrace.pipeline import check

    rows = [np.full((2, 3), i, np.float32).tolist() for i in range(200)]
    rows[13] = rows[13][:1]
    rows[150][0] = [1.0]
    t = pa.table({"x": pa.array(rows, pa.list_(pa.list_(pa.float32()))), "i": range(200)})
    pq.write_table(t, tmp_path / "c.parquet", row_group_size=64)
    src = TableSource(tmp_path / "c.parquet", shapes={"x": (2, 3)})
    report = check(src, batch_size=16)
    assert report.complete and len(report.problems) == 2, report
    named = sorted(int(p.message.split(": row ")[1].split()[0]) for p in report.problems)
    assert named == [13, 150]


def test_damaged_list_offsets_of_a_shaped_column_are_corrupt_data(tmp_path: Path) -> None:
    # Offsets written by hand into an Arrow file (its writer does not check their order):
    # a list of negative length is the file's damage, named as such, never an IndexError
    # or numbers from elsewhere in the column. (Offsets past the values' end are refused
    # by pyarrow's validation of the record batch, as for every list column.)
    values = pa.array(np.arange(24, dtype=np.float32))
    offsets = np.arange(0, 25, 3, dtype=np.int32)  # 8 lists of 3
    offsets[3] = 20
    inner = pa.ListArray.from_buffers(
        pa.list_(pa.float32()), 8, [None, pa.py_buffer(offsets.tobytes())], children=[values]
    )
    rows = np.arange(0, 9, 2, dtype=np.int32)  # 4 rows of 2 lists
    outer = pa.ListArray.from_buffers(
        pa.list_(inner.type), 4, [None, pa.py_buffer(rows.tobytes())], children=[inner]
    )
    t = pa.table({"x": outer})
    with pa.ipc.new_file(tmp_path / "dmg.arrow", t.schema) as w:
        w.write_table(t)
    tb = Table.open(tmp_path / "dmg.arrow", shapes={"x": (2, 3)})
    with pytest.raises(
        FormatError, match=r"dmg\.arrow: column 'x': corrupt data in record batch 0"
    ):
        tb.read_rows([0])
