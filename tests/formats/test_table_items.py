"""Rows of as many items of one shape as each holds: a detection dataset's boxes
(``Sequence(Sequence(Value("float32"), length=4))``, stored as
``list<fixed_size_list<float>[4]>``), a feature extractor's frames of varying count
(``shapes={"frames": (None, 6)}`` over lists of lists), a ``datasets`` ArrayND whose
first dimension is ``None``. A :class:`Table` gives them as :class:`Ragged` of
``(items, *shape)`` values; a :class:`TableSource` pads each row's items to its width,
``(B, width, *shape)`` with a ``(B, width)`` mask. Until 2026-12-05 each was refused
("holds lists of lists", "whose first dimension varies by row")."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from headrace.errors import ConfigError, FormatError
from headrace.formats import Ragged, Table, TableSource
from headrace.pipeline import Loader, check

datasets = pytest.importorskip("datasets")

N = 40


def _detection(tmp_path: Path) -> tuple[list[np.ndarray], list[np.ndarray], Path, Path]:
    """A detection dataset as the Hub holds one (``objects``: a Sequence of dicts, stored
    as a struct of lists), 0 to 6 boxes a row: each row's boxes and categories, the
    ``save_to_disk`` folder (3 shards) and a Parquet file (row groups of 16)."""
    rng = np.random.default_rng(11)
    boxes = [rng.random((int(rng.integers(0, 7)), 4)).astype(np.float32) for _ in range(N)]
    cats = [rng.integers(0, 80, len(b)) for b in boxes]
    features = datasets.Features(
        {
            "objects": datasets.Sequence(
                {
                    "bbox": datasets.Sequence(datasets.Value("float32"), length=4),
                    "category": datasets.Value("int64"),
                }
            ),
            "id": datasets.Value("int64"),
        }
    )
    ds = datasets.Dataset.from_dict(
        {
            "objects": [
                {"bbox": b.tolist(), "category": c.tolist()}
                for b, c in zip(boxes, cats, strict=True)
            ],
            "id": list(range(N)),
        },
        features=features,
    )
    ds.save_to_disk(str(tmp_path / "ds"), num_shards=3)
    ds.to_parquet(str(tmp_path / "d.parquet"), batch_size=16)
    return boxes, cats, tmp_path / "ds", tmp_path / "d.parquet"


def test_boxes_read_as_rows_of_items_and_pad_to_the_width(tmp_path: Path) -> None:
    boxes, cats, saved, parquet = _detection(tmp_path)
    cols = ["objects.bbox", "objects.category", "id"]
    idx = np.array([39, 0, 17, 33, 16, 16, 5])
    for where in (saved, parquet):
        # The schema gives the boxes' shape (fixed-size lists of 4): no shapes= needed.
        with Table.open(where, columns=cols) as tb:
            assert tb.columns["objects.bbox"].item_shape == (4,)
            got = tb.read_rows(idx)["objects.bbox"]
            assert isinstance(got, Ragged) and got.values.shape[1:] == (4,)
            for k, i in enumerate(idx):
                np.testing.assert_array_equal(got.row(k), boxes[i])
            copy = pickle.loads(pickle.dumps(tb))  # a worker's
            np.testing.assert_array_equal(copy.read_rows(idx)["objects.bbox"].values, got.values)
            copy.close()
        for side in ("right", "left"):
            src = TableSource(
                where,
                columns=cols,
                widths={"objects.bbox": 8, "objects.category": 8},
                pad_values={"objects.bbox": -1.0, "objects.category": -1},
                pad_side=side,
                shuffle="full",
            )
            with Loader(src, batch_size=8, seed=2) as ld:
                for _, b in zip(range(6), ld, strict=False):
                    assert b["objects.bbox"].shape == (8, 8, 4)
                    assert b["objects.bbox_mask"].shape == (8, 8)
                    for row, i in enumerate(b["id"]):
                        n = len(boxes[i])
                        real = slice(0, n) if side == "right" else slice(8 - n, 8)
                        np.testing.assert_array_equal(b["objects.bbox"][row][real], boxes[i])
                        np.testing.assert_array_equal(b["objects.category"][row][real], cats[i])
                        mask = b["objects.bbox_mask"][row]
                        assert mask.sum() == n and mask[real].all()
                        assert (b["objects.bbox"][row][~mask] == -1).all()
            src.close()


def test_a_row_of_more_items_than_the_width_is_named_or_truncated(tmp_path: Path) -> None:
    boxes, _, _, parquet = _detection(tmp_path)
    most = int(np.argmax([len(b) for b in boxes]))
    n = len(boxes[most])
    src = TableSource(parquet, columns=["objects.bbox"], width=n - 1, shuffle="none")
    with pytest.raises(
        ConfigError, match=rf"column 'objects.bbox': row {most} \(sample {most}\) has {n} items"
    ):
        src.read(0, np.array([most]))
    cut = TableSource(parquet, columns=["objects.bbox"], width=2, truncate=True, shuffle="none")
    b = cut.read(0, np.array([most]))
    np.testing.assert_array_equal(b["objects.bbox"][0], boxes[most][:2])  # its first 2
    with pytest.raises(ConfigError, match=r"column 'objects.bbox' holds variable-length lists"):
        TableSource(parquet, columns=["objects.bbox"])  # no width


def _frames(tmp_path: Path, rows: list[object], name: str) -> Path:
    """``rows`` (lists of lists of float32) as column ``frames`` of a Parquet file of
    row groups of 10, beside ``i``."""
    t = pa.table(
        {"frames": pa.array(rows, pa.list_(pa.list_(pa.float32()))), "i": range(len(rows))}
    )
    pq.write_table(t, tmp_path / name, row_group_size=10)
    return tmp_path / name


def _frame_rows(n: int) -> list[object]:
    """Row ``i``: ``i % 5`` frames of 3 numbers, each ``i``."""
    return [np.full((i % 5, 3), i, np.float32).tolist() for i in range(n)]


def test_lists_of_lists_given_a_first_dimension_none(tmp_path: Path) -> None:
    path = _frames(tmp_path, _frame_rows(30), "f.parquet")
    with pytest.raises(FormatError, match=r"as rows of items padded to a width with shapes="):
        Table.open(path)  # lists of lists: the inner length is not in the schema
    src = TableSource(path, shapes={"frames": (None, 3)}, width=4, shuffle="full")
    assert src.fingerprint()["shapes"] == {"frames": [None, 3]}
    b = src.read(0, np.arange(30))
    for row, i in enumerate(b["i"]):
        np.testing.assert_array_equal(b["frames"][row][: i % 5], np.full((i % 5, 3), i))
        assert b["frames_mask"][row].sum() == i % 5
    # The CLI's spelling of it: Nx3.
    from headrace.cli import main

    args = ["check", str(path), "--format", "table", "--shape", "frames=Nx3", "--width", "4"]
    assert main(args) == 0


def test_an_item_of_another_shape_is_named_and_the_other_rows_read(tmp_path: Path) -> None:
    rows = _frame_rows(30)
    rows[13][1] = [13.0, 13.0]  # type: ignore[index]  # a frame of 2 numbers
    rows[24][0] = None  # type: ignore[index]  # a null frame
    rows[28][2][1] = None  # type: ignore[index]  # a null number
    rows[8] = None  # a null row
    path = _frames(tmp_path, rows, "bad.parquet")
    tb = Table.open(path, shapes={"frames": (None, 3)})
    others = np.array([r for r in range(30) if r not in (8, 13, 24, 28)])
    got = tb.read_rows(others)["frames"]
    assert isinstance(got, Ragged)
    for k, r in enumerate(others):  # those beside the bad ones too, found by offsets
        np.testing.assert_array_equal(got.row(k), np.full((r % 5, 3), r))
    for row, has in ((13, "a list of 2"), (24, "a null list")):
        with pytest.raises(
            FormatError,
            match=rf"bad\.parquet: column 'frames': row {row} does not have the column's shape "
            rf"\[None, 3\]: {has} where 3 belong \(1 such row\(s\) in row group {row // 10}",
        ):
            tb.read_rows([row // 10 * 10, row])
    with pytest.raises(FormatError, match=r"column 'frames': 1 row\(s\) hold null list items"):
        tb.read_rows([28])
    with pytest.raises(FormatError, match=r"column 'frames': row 8 is null"):
        tb.read_rows([8])
    tb.close()
    # A check reads every row and names each bad one, no other.
    report = check(TableSource(path, shapes={"frames": (None, 3)}, width=4), batch_size=8)
    assert report.complete and len(report.problems) == 4, report
    for named in ("rows 28;", "row 8 is null", "row 13 does not", "row 24 does not"):
        assert sum(named in p.message for p in report.problems) == 1, (named, report)


def test_a_datasets_array_of_a_first_dimension_none_reads_as_rows_of_items(
    tmp_path: Path,
) -> None:
    rows = [np.full((i % 4, 3), i, np.float32) for i in range(12)]
    features = datasets.Features({"x": datasets.Array2D(shape=(None, 3), dtype="float32")})
    ds = datasets.Dataset.from_dict({"x": rows}, features=features)
    ds.save_to_disk(str(tmp_path / "a2"))
    for shapes in (None, {"x": (None, 3)}):
        with Table.open(tmp_path / "a2", shapes=shapes) as tb:
            got = tb.read_rows([11, 4, 3])["x"]
            assert isinstance(got, Ragged)
            for k, i in enumerate((11, 4, 3)):
                np.testing.assert_array_equal(got.row(k), rows[i])
    with pytest.raises(ConfigError, match=r"Array2D feature of shape \[None, 3\]; shapes= gives"):
        Table.open(tmp_path / "a2", shapes={"x": (None, 4)})


def test_a_none_past_the_first_dimension_and_misfit_levels_are_refused(tmp_path: Path) -> None:
    path = _frames(tmp_path, _frame_rows(10), "f.parquet")
    for shape in ((3, None), (None, None, 3)):  # ((None, None): test_table_lists.py)
        with pytest.raises(ConfigError, match=r"the first of which may be None"):
            Table.open(path, shapes={"frames": shape})  # type: ignore[dict-item]
    with pytest.raises(ConfigError, match=r"is 2 level\(s\) of lists; shapes= gives it \[None\]"):
        Table.open(path, shapes={"frames": (None,)})
    pts = [[[1, 2, 3]] * 2] * 4  # rows of exactly 2 lists: a fixed outer level
    pq.write_table(
        pa.table({"p": pa.array(pts, pa.list_(pa.list_(pa.int16(), 3), 2))}),
        tmp_path / "p.parquet",
    )
    with pytest.raises(
        ConfigError, match=r"holds lists of 2 items where shapes= gives \[None, 3\]"
    ):
        Table.open(tmp_path / "p.parquet", shapes={"p": (None, 3)})


def test_an_int_vocab_size_leaves_rows_of_items_alone(tmp_path: Path) -> None:
    # Integer boxes (pixel corners) are not token ids: vocab_size=100 checks 'ids' only.
    t = pa.table(
        {
            "ids": pa.array([[1, 2], [3]], pa.list_(pa.int32())),
            "box": pa.array([[[0, 0, 640, 480]], []], pa.list_(pa.list_(pa.int32(), 4))),
        }
    )
    pq.write_table(t, tmp_path / "v.parquet")
    src = TableSource(tmp_path / "v.parquet", width=2, vocab_size=100, shuffle="none")
    b = src.read(0, np.arange(2))
    assert b["box"][0, 0].tolist() == [0, 0, 640, 480] and not b["box_mask"][1].any()
    with pytest.raises(ConfigError, match=r"vocab_size names column\(s\) \['box'\]"):
        TableSource(tmp_path / "v.parquet", width=2, vocab_size={"box": 100})


def test_an_array_feature_of_a_dimension_of_no_size_is_refused(tmp_path: Path) -> None:
    # A file's metadata may say what datasets would not make. (A None past the first
    # dimension is refused by datasets itself when the schema is read, where imported.)
    meta = {
        b"ARROW:extension:metadata": b'[[0, 3], "float32"]',
        b"ARROW:extension:name": b"datasets.features.features.Array2DExtensionType",
    }
    field = pa.field("x", pa.list_(pa.list_(pa.float32())), metadata=meta)
    table = pa.table({"x": pa.array([[[1.0] * 3] * 2] * 4, field.type)}, schema=pa.schema([field]))
    pq.write_table(table, tmp_path / "odd.parquet")
    with pytest.raises(FormatError, match=r"only its first dimension may be None"):
        Table.open(tmp_path / "odd.parquet")


def _list_of_structs(tmp_path: Path, rows: list[object]) -> tuple[Path, Path]:
    """``rows`` of ``objects`` as datasets' ``List({...})`` stores them (its newer
    detection layout: ``list<struct<bbox: fixed_size_list<float>[4], category: int64>>``),
    beside ``id``: a ``save_to_disk`` folder (2 shards) and a Parquet file (row groups of
    16)."""
    features = datasets.Features(
        {
            "objects": datasets.List(
                {
                    "bbox": datasets.List(datasets.Value("float32"), length=4),
                    "category": datasets.Value("int64"),
                }
            ),
            "id": datasets.Value("int64"),
        }
    )
    ds = datasets.Dataset.from_dict({"objects": rows, "id": list(range(len(rows)))}, features)
    ds.save_to_disk(str(tmp_path / "ls"), num_shards=2)
    ds.to_parquet(str(tmp_path / "ls.parquet"), batch_size=16)
    return tmp_path / "ls", tmp_path / "ls.parquet"


def _objects(n: int) -> tuple[list[np.ndarray], list[object]]:
    """Row ``i``'s boxes (0 to 4), and its objects: each box with category ``10 i + j``."""
    rng = np.random.default_rng(8)
    boxes = [rng.random((int(rng.integers(0, 5)), 4)).astype(np.float32) for _ in range(n)]
    rows: list[object] = [
        [{"bbox": b.tolist(), "category": 10 * i + j} for j, b in enumerate(bs)]
        for i, bs in enumerate(boxes)
    ]
    return boxes, rows


def test_fields_of_a_list_of_structs_read_as_rows_of_items(tmp_path: Path) -> None:
    # Until 2026-12-05 refused ("'objects' is list<...>, not a struct").
    boxes, rows = _objects(N)
    cols = ["objects.bbox", "objects.category", "id"]
    for where in _list_of_structs(tmp_path, rows):
        with Table.open(where, columns=cols) as tb:
            assert tb.columns["objects.bbox"].item_shape == (4,)
            got = tb.read_rows(np.array([39, 0, 17, 33]))
            for k, i in enumerate((39, 0, 17, 33)):
                np.testing.assert_array_equal(got["objects.bbox"].row(k), boxes[i])
                assert got["objects.category"].row(k).tolist() == [
                    10 * i + j for j in range(len(boxes[i]))
                ]
        src = TableSource(where, columns=cols, width=6, pad_values={"objects.category": -1})
        with Loader(src, batch_size=8, seed=4) as ld:
            for _, b in zip(range(5), ld, strict=False):
                for row, i in enumerate(b["id"]):
                    n = len(boxes[i])
                    np.testing.assert_array_equal(b["objects.bbox"][row][:n], boxes[i])
                    assert b["objects.category"][row].tolist() == [
                        *(10 * i + j for j in range(n)),
                        *[-1] * (6 - n),
                    ]
                    assert b["objects.bbox_mask"][row].sum() == n
        src.close()


def test_null_objects_and_rows_of_a_list_of_structs_are_named(tmp_path: Path) -> None:
    boxes, rows = _objects(N)
    rows[21] = [{"bbox": [1.0, 2.0, 3.0, 4.0], "category": 1}, None]  # a null object
    cols = ["objects.bbox", "id"]
    for where in _list_of_structs(tmp_path / "objects", rows):
        # Its box is a null list of the items' shape, its category a null number.
        src = TableSource(where, columns=cols, width=6, shuffle="none")
        with pytest.raises(
            FormatError,
            match=r"column 'objects.bbox': row 21 does not have the column's "
            r"shape \[None, 4\]: a null list where 4 belong",
        ):
            src.read(0, np.arange(10, N))
        with pytest.raises(
            FormatError, match=r"column 'objects.category': .*hold null list items.*rows 21"
        ):
            TableSource(where, columns=["objects.category"], width=6).read(0, np.arange(N))
        others = np.array([r for r in range(N) if r != 21])
        b = src.read(0, others)
        for row, i in enumerate(others):
            np.testing.assert_array_equal(b["objects.bbox"][row][: len(boxes[i])], boxes[i])
    rows[21], rows[9] = [], None  # a null row: refused when an Arrow source is made
    saved, parquet = _list_of_structs(tmp_path / "rows", rows)
    with pytest.raises(FormatError, match=r"column 'objects.bbox': row 9 is null"):
        TableSource(saved, columns=cols, width=6)
    src = TableSource(parquet, columns=cols, width=6, shuffle="none")
    with pytest.raises(FormatError, match=r"column 'objects.bbox': row 9 is null"):
        src.read(0, np.arange(N))
