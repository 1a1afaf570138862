"""Local Arrow files that fail to open when packed (s50): ``table_token_files`` names
each, on the first error's ``others_failed``, as ``Table`` and object storage do; it
told of the first alone (the others counted in a note)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from headrace.errors import FormatError
from headrace.formats import table_token_files


def _ipc() -> bytes:
    table = pa.table({"ids": [np.arange(k, dtype=np.int32) for k in range(1, 41)]})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table, max_chunksize=10)
    return bytes(sink.getvalue())


def test_every_local_file_that_fails_to_open_is_named(tmp_path: Path) -> None:
    good = _ipc()
    bodies = {0: good, 1: b"tiny", 2: good, 3: good[:-20], 4: b"PAR1" + good[4:]}
    for i, body in bodies.items():
        (tmp_path / f"p{i}.arrow").write_bytes(body)
    with pytest.raises(FormatError) as got:
        table_token_files(tmp_path, "ids")
    assert str(got.value).startswith(f"{tmp_path / 'p1.arrow'}: ")
    others = got.value.others_failed  # type: ignore[attr-defined]
    assert [str(e).split(": ")[0] for e in others] == [
        str(tmp_path / f"p{i}.arrow") for i in (3, 4)
    ]
    assert "2 other files of the table failed to open too" in got.value.__notes__[-1]


def test_one_local_file_that_fails_to_open_is_raised_alone(tmp_path: Path) -> None:
    (tmp_path / "p0.arrow").write_bytes(_ipc())
    (tmp_path / "p1.arrow").write_bytes(b"tiny")
    with pytest.raises(FormatError, match=r"p1\.arrow") as got:
        table_token_files(tmp_path, "ids")
    assert got.value.others_failed == []  # type: ignore[attr-defined]
    assert not getattr(got.value, "__notes__", [])
