"""Arrow's canonical fixed-shape tensor columns (``pa.fixed_shape_tensor``, what
``pa.FixedShapeTensorArray.from_numpy_ndarray`` makes of a NumPy array) read as
``(B, *shape)``, as pyarrow's ``to_numpy_ndarray`` gives them, from every file kind."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from _table_battery import KINDS, write
from headrace.errors import FormatError
from headrace.formats import Table, TableSource

N = 40
ARRAY = np.arange(N * 6, dtype=np.float32).reshape(N, 2, 3) - 7.5


@pytest.mark.parametrize("kind", KINDS)
def test_a_fixed_shape_tensor_column_reads_as_its_shape(tmp_path: Path, kind: str) -> None:
    tensors = pa.FixedShapeTensorArray.from_numpy_ndarray(ARRAY)
    path = write(kind, tmp_path / "t", pa.table({"x": tensors, "i": np.arange(N)}), (7, 0, 33))
    rows = np.array([39, 0, 6, 7, 20], np.int64)
    for where in (str(path), path.as_uri()):  # local, and read by ranges as on S3
        out = Table.open(where).read_rows(rows)
        np.testing.assert_array_equal(out["x"], ARRAY[rows])
        assert out["x"].dtype == np.float32
        src = TableSource(where, columns=["x"], shuffle="window", window_rows=10)
        samples = np.arange(N, dtype=np.int64)
        got = src.read(0, samples)["x"]
        np.testing.assert_array_equal(got, ARRAY[src.starts(0, samples)[1]])
        src.close()


def test_a_tensor_with_a_null_number_is_refused_by_row(tmp_path: Path) -> None:
    flat = pa.array([None if i == 9 else float(i) for i in range(N * 6)], pa.float32())
    storage = pa.FixedSizeListArray.from_arrays(flat, 6)
    tensors = pa.ExtensionArray.from_storage(pa.fixed_shape_tensor(pa.float32(), (2, 3)), storage)
    path = write("arrow", tmp_path / "t", pa.table({"x": tensors}), (N,))
    with pytest.raises(FormatError, match=r"column 'x': .*rows 1\b"):
        TableSource(str(path), columns=["x"], shuffle="none")
    np.testing.assert_array_equal(
        Table.open(path).read_rows([3])["x"], np.arange(18, 24, dtype=np.float32).reshape(1, 2, 3)
    )


def test_a_permuted_tensor_is_refused_naming_its_layout(tmp_path: Path) -> None:
    typ = pa.fixed_shape_tensor(pa.float32(), (2, 3), permutation=[1, 0])
    storage = pa.FixedSizeListArray.from_arrays(pa.array(ARRAY.reshape(-1)), 6)
    path = write(
        "arrow", tmp_path / "t", pa.table({"x": pa.ExtensionArray.from_storage(typ, storage)}), (N,)
    )
    with pytest.raises(FormatError, match=r"column 'x' .*permutation"):
        Table.open(path)
