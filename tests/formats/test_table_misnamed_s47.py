"""A table file whose name says the other format (Parquet bytes named ``.arrow``, Arrow
IPC bytes named ``.parquet``): on object storage, where the name picks the reader, the
refusal says what the bytes are and what to name them, not that the file is damaged."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest

from headrace.errors import FormatError
from headrace.formats import Table

TABLE = pa.table({"a": np.arange(100)})


def test_parquet_bytes_named_arrow_on_object_storage_are_named_parquet(tmp_path: Path) -> None:
    path = tmp_path / "data.arrow"
    pq.write_table(TABLE, path)
    assert Table.open(path).read_rows([1, 50])["a"].tolist() == [1, 50]  # local: sniffed
    # It said: "truncated or corrupt Arrow IPC stream: the message at byte 0 claims a
    # 827474256-byte header ... copy the file again".
    with pytest.raises(FormatError, match=r"data\.arrow: a Parquet file \(it starts with PAR1\)"):
        Table.open(path.as_uri())


@pytest.mark.parametrize("stream", [False, True], ids=["file", "stream"])
def test_arrow_bytes_named_parquet_say_they_are_arrow(tmp_path: Path, stream: bool) -> None:
    path = tmp_path / "data.parquet"
    with (ipc.new_stream if stream else ipc.new_file)(path, TABLE.schema) as w:
        w.write_table(TABLE)
    for where in (str(path), path.as_uri()):
        with pytest.raises(FormatError, match=r"data\.parquet: not a Parquet file: .*Arrow IPC"):
            Table.open(where)
        with pytest.raises(FormatError, match=r"name it \.arrow"):
            Table.open(where)
