"""``datasets``' fixed-shape ``Array2D`` ... ``Array5D`` features (precomputed pixel
values, embeddings, spectrograms) read as ``(B, *shape)``: stored as nested lists with
the shape in an extension type, or, where ``datasets`` is not imported, in the field's
metadata. Until 2026-12-03 such a column was refused ("cannot turn into arrays")."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from headrace.errors import FormatError
from headrace.formats import Table, TableSource
from headrace.pipeline import Loader

datasets = pytest.importorskip("datasets")

N = 60


def _dataset() -> tuple[object, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    a3 = rng.integers(-50, 50, (N, 2, 3, 4)).astype(np.int16)
    a2 = rng.random((N, 5, 3)).astype(np.float32)
    features = datasets.Features(
        {
            "pixels": datasets.Array3D((2, 3, 4), "int16"),
            "emb": datasets.Array2D((5, 3), "float32"),
            "label": datasets.Value("int64"),
        }
    )
    ds = datasets.Dataset.from_dict(
        {"pixels": list(a3), "emb": list(a2), "label": list(range(N))}, features=features
    )
    return ds, a3, a2


def test_array_features_read_as_their_shape_from_arrow_and_parquet(tmp_path: Path) -> None:
    ds, a3, a2 = _dataset()
    ds.save_to_disk(str(tmp_path / "ds"), num_shards=3)  # type: ignore[attr-defined]
    ds.to_parquet(str(tmp_path / "d.parquet"), batch_size=16)  # type: ignore[attr-defined]
    idx = np.array([59, 0, 21, 40, 7, 7])
    for where in (tmp_path / "ds", tmp_path / "d.parquet"):
        tb = Table.open(where, columns=["pixels", "emb", "label"])
        got = tb.read_rows(idx)
        assert got["pixels"].shape == (6, 2, 3, 4) and got["pixels"].dtype == np.int16
        assert np.array_equal(got["pixels"], a3[idx]) and np.array_equal(got["emb"], a2[idx])
        src = TableSource(where, columns=["pixels", "label"], shuffle="full")
        with Loader(src, batch_size=8, seed=1) as ld:
            for _, b in zip(range(10), ld, strict=False):
                assert np.array_equal(b["pixels"], a3[b["label"]])


def _without_datasets(code: str, path: Path) -> str:
    """What ``code`` prints, run with ``path`` as its argument in a new process (which
    imports no ``datasets``, unless the code does)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    run = [sys.executable, "-c", code, str(path)]
    return subprocess.run(run, capture_output=True, text=True, check=True, env=env).stdout


def test_the_fingerprint_does_not_depend_on_datasets_being_imported(tmp_path: Path) -> None:
    # With datasets imported the column's type is its extension type; without, its
    # storage and metadata: the same data must give one fingerprint either way.
    ds, _, _ = _dataset()
    ds.save_to_disk(str(tmp_path / "ds"))  # type: ignore[attr-defined]
    here = TableSource(tmp_path / "ds", columns=["pixels", "label"]).fingerprint()["schema"]
    code = (
        "import sys; from headrace.formats import TableSource; "
        "s = TableSource(sys.argv[1], columns=['pixels', 'label']); "
        "assert 'datasets' not in sys.modules; print(s.fingerprint()['schema'])"
    )
    assert _without_datasets(code, tmp_path / "ds").strip() == here


def _stored(shapes: list[tuple[int, ...]], feature: str) -> pa.Table:
    """What datasets writes for ``Array2D(feature)``, as pyarrow sees it without datasets:
    nested lists, and the shape in the field's metadata."""
    meta = {
        b"ARROW:extension:metadata": feature.encode(),
        b"ARROW:extension:name": b"datasets.features.features.Array2DExtensionType",
    }
    rows = [np.arange(int(np.prod(s)), dtype=np.float32).reshape(s).tolist() for s in shapes]
    field = pa.field("x", pa.list_(pa.list_(pa.float32())), metadata=meta)
    return pa.table({"x": pa.array(rows, field.type)}, schema=pa.schema([field]))


def test_a_row_of_another_shape_or_a_varying_shape_is_refused(tmp_path: Path) -> None:
    t = _stored([(2, 3)] * 10 + [(2, 2)] + [(2, 3)] * 5, '[[2, 3], "float32"]')
    pq.write_table(t, tmp_path / "bad.parquet", row_group_size=10)
    tb = Table.open(tmp_path / "bad.parquet")
    assert tb.read_rows([0, 9])["x"].shape == (2, 2, 3)
    # The row alone, named: its row group's other rows read (until 2026-12-05 the whole
    # row group was refused, since a list of another length shifts the rows after it).
    with pytest.raises(
        FormatError,
        match=r"bad\.parquet: column 'x': row 10 does not have the column's shape "
        r"\[2, 3\]: a list of 2 where 3 belong \(1 such row\(s\) in row group 1, rows "
        r"\[10, 16\) of the table: rows 10; the row group's other rows read as usual\)",
    ):
        tb.read_rows([15, 10])
    got = tb.read_rows([15, 11])["x"]
    np.testing.assert_array_equal(got, np.arange(6, dtype=np.float32).reshape(1, 2, 3).repeat(2, 0))
    # A first dimension None: rows of items of (3,), as many as each holds (refused
    # until 2026-12-05; test_table_items.py).
    t = _stored([(1, 3), (2, 3)], '[[null, 3], "float32"]')
    pq.write_table(t, tmp_path / "dyn.parquet")
    assert Table.open(tmp_path / "dyn.parquet").read_rows([1, 0])["x"].lengths.tolist() == [2, 1]


def test_a_row_with_a_null_number_fails_alone_not_its_row_group(tmp_path: Path) -> None:
    # Before: row 13's null number refused every row of its row group (rows 10-19).
    meta = {
        b"ARROW:extension:metadata": b'[[2, 3], "float32"]',
        b"ARROW:extension:name": b"datasets.features.features.Array2DExtensionType",
    }
    field = pa.field("x", pa.list_(pa.list_(pa.float32())), metadata=meta)
    rows = [np.full((2, 3), i, dtype=np.float32).tolist() for i in range(20)]
    rows[13][1][2] = None
    pq.write_table(pa.table({"x": pa.array(rows, field.type)}, schema=pa.schema([field])),
                   tmp_path / "n.parquet", row_group_size=10)  # fmt: skip
    tb = Table.open(tmp_path / "n.parquet")
    others = [r for r in range(20) if r != 13]
    got = tb.read_rows(others)["x"]
    np.testing.assert_array_equal(got, np.array([np.full((2, 3), r) for r in others]))
    with pytest.raises(
        FormatError,
        match=r"n\.parquet: column 'x': 1 row\(s\) hold null list items in row group 1, "
        r"rows \[10, 20\) of the table: rows 13; the row group's other rows read as usual",
    ):
        tb.read_rows([12, 13])


def test_an_array_feature_not_stored_as_its_levels_of_numbers_is_refused(tmp_path: Path) -> None:
    # Metadata naming an Array2D on one level of lists, or on lists of lists of strings:
    # a damaged or hand-made schema, refused by name rather than read as other numbers.
    # In a process without datasets imported: where it is, pyarrow drops an extension
    # name whose storage does not fit it, and the column reads as its plain type.
    code = """if True:
        import sys
        import pyarrow as pa, pyarrow.parquet as pq
        from headrace.errors import FormatError
        from headrace.formats import Table
        meta = {
            b"ARROW:extension:metadata": b'[[2, 3], "float32"]',
            b"ARROW:extension:name": b"datasets.features.features.Array2DExtensionType",
        }
        for typ, rows in [
            (pa.list_(pa.float32()), [[1.0] * 6] * 4),
            (pa.list_(pa.list_(pa.string())), [[["a"] * 3] * 2] * 4),
        ]:
            path = sys.argv[1]
            schema = pa.schema([pa.field("x", typ, metadata=meta)])
            pq.write_table(pa.table({"x": pa.array(rows, typ)}, schema=schema), path)
            try:
                Table.open(path)
            except FormatError as exc:
                print(exc)
        assert "datasets" not in sys.modules
    """
    got = _without_datasets(code, tmp_path / "odd.parquet").splitlines()
    assert len(got) == 2, got
    for line in got:
        assert re.search(
            r"odd\.parquet: column 'x' is a datasets Array2D feature of shape \(2, 3\) "
            r"stored as list<.*>, not 2 levels of lists of numbers",
            line,
        ), line
