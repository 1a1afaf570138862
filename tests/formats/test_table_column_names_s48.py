"""Column names given as a NumPy array (``df.columns.values``, ``np.array([...])``):
read as the names they are (``'x'``, not ``np.str_('x')`` in keys and messages);
an item that is not a name refused by position, not a TypeError from deep inside."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from headrace.errors import ConfigError  # noqa: E402
from headrace.formats import Table, TableSource  # noqa: E402


def _file(tmp_path: Path) -> Path:
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"x": [1, 2, 3], "y": [1.0, 2.0, 3.0]}), path)
    return path


def test_names_from_a_numpy_array_are_plain_strings(tmp_path: Path) -> None:
    path = _file(tmp_path)
    with Table.open(path, columns=np.array(["y", "x"])) as table:
        assert [type(c) for c in table.columns] == [str, str]
        got = table.read_rows([0], np.array(["x"]))
        assert [type(c) for c in got] == [str]
        with pytest.raises(ConfigError, match=r"column\(s\) \['z'\] not opened"):
            table.read_rows([0], np.array(["z"]))
    with pytest.raises(ConfigError, match=r"no column\(s\) \['z'\]; available"):
        Table.open(path, columns=np.array(["x", "z"]))
    source = TableSource(str(path), columns=np.array(["x", "y"]))
    assert [type(c) for c in source.names] == [str, str]
    assert "np.str_" not in repr(source)


@pytest.mark.parametrize("given", [[0], [b"x"], ["x", None], 3])
def test_a_name_that_is_not_a_string_is_refused_by_position(tmp_path: Path, given: object) -> None:
    # Before: TypeError "argument of type 'int' is not iterable" (or "a bytes-like
    # object is required") from inside the schema lookup.
    path = _file(tmp_path)
    with pytest.raises(ConfigError, match=r"columns must be a list of column names"):
        Table.open(path, columns=given)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"columns must be a list of column names"):
        TableSource(str(path), columns=given)  # type: ignore[arg-type]
    with Table.open(path) as table, pytest.raises(ConfigError, match=r"column names"):
        table.read_rows([0], given)  # type: ignore[arg-type]
