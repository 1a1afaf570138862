"""A dictionary column whose dictionary holds a null: the rows whose index points at it
are null (pyarrow's ``to_pylist`` gives ``None``), though the index itself is valid and
the record batch's header counts no null. Refused up front, as other null rows are."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from headrace.errors import FormatError
from headrace.formats import Table, TableSource


def _write(path: Path) -> pa.Array:
    labels = pa.DictionaryArray.from_arrays(
        pa.array([0, 1, 0, 2, 0], pa.int8()), pa.array([10, 20, None], pa.int64())
    )
    assert labels.to_pylist()[3] is None and labels.null_count == 0
    table = pa.table({"label": labels, "i": np.arange(5)})
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table)
    return labels


def test_a_null_in_the_dictionary_is_refused_up_front(tmp_path: Path) -> None:
    # Until now only refused once a read reached row 3 (TableSource opened fine).
    path = tmp_path / "t.arrow"
    _write(path)
    table = Table.open(str(path))
    with pytest.raises(FormatError, match=r"t\.arrow: column 'label': row 3 is null"):
        table.refuse_nulls(["label"])
    table.refuse_nulls(["i"])
    got = table.read_rows([4, 1, 0], ["label"])["label"]
    assert got.tolist() == [10, 20, 10]
    table.close()
    with pytest.raises(FormatError, match=r"column 'label': row 3 is null"):
        TableSource(str(path), shuffle="none")
