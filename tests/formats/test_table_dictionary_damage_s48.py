"""A damaged dictionary column of a local Arrow file is refused by name, not read: the
file is mapped as it is, and a dictionary whose length its buffers do not hold made
``dictionary_decode`` read outside them (a segfault, the whole process lost, until
2026-12-07); indices past the dictionary the decode refuses itself."""

from __future__ import annotations

import struct
from pathlib import Path

import pyarrow as pa
import pytest

from headrace.errors import FormatError
from headrace.formats import Table


def _write(path: Path, arr: pa.Array) -> bytes:
    t = pa.table({"c": arr})
    with pa.ipc.new_file(path, t.schema) as w:
        w.write_table(t)
    return path.read_bytes()


def test_indices_past_the_dictionary_are_refused(tmp_path: Path) -> None:
    indices = pa.array([0, 7, 2, 1, 0], pa.int32())
    d = pa.DictionaryArray.from_arrays(indices, pa.array(["aa", "bb", "cc"]), safe=False)
    _write(tmp_path / "t.arrow", d)
    with pytest.raises(FormatError, match=r"column 'c': corrupt data .*Index 7 out of bounds"):
        Table.open(tmp_path / "t.arrow").read_rows([0, 1, 2])


def test_a_dictionary_longer_than_its_buffers_is_refused(tmp_path: Path) -> None:
    d = pa.DictionaryArray.from_arrays(
        pa.array([0, 1, 2, 1, 0], pa.int32()), pa.array(["aa", "bb", "cc"])
    )
    raw = _write(tmp_path / "ok.arrow", d)
    node = struct.pack("<qq", 3, 0)  # a field node of 3 values, no nulls: the dictionary's
    at = [i for i in range(len(raw)) if raw.startswith(node, i)]
    said = []
    for k, i in enumerate(at):  # the dictionary batch's length among them
        path = tmp_path / f"bad{k}.arrow"
        path.write_bytes(raw[:i] + struct.pack("<qq", 2236382, 0) + raw[i + 16 :])
        with pytest.raises(FormatError) as got:  # at open, or at the read: never a crash
            Table.open(path).read_rows([0, 1, 2])
        said.append(str(got.value))
    assert any("too small" in s and "column 'c'" in s for s in said), said
