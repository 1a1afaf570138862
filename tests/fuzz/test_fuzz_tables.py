"""Parquet and Arrow IPC (file and stream): cut, flipped, footers and lengths forged.

Flips are 70 in the footer or last batch and 70 anywhere (200 and 200 under
``HEADRACE_FUZZ_ALL=1``): 340 cases a target, 9 s of CPU for the module alone (2c,
2026-12-07; 600 cases and 14 s with all the flips).
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from _harness import check
from _mutate import FUZZ_ALL, Case, Field, flips, forge_fields, truncations
from _targets import TABLE_BATCH, TARGETS, table_ids


def _footer_length(data: bytes, magic: bytes) -> Field:
    # Both formats end with the footer's length (int32) before a magic of their own.
    at = len(data) - len(magic) - 4
    return Field("footer_len", at, "<i", struct.unpack_from("<i", data, at)[0])


@pytest.mark.parametrize(
    ("target", "magic"),
    [("parquet", b"PAR1"), ("arrow_file", b"ARROW1"), ("arrow_stream", None)],
)
def test_tables(target: str, magic: bytes | None, tmp_path: Path) -> None:
    data = TARGETS[target].pristine()
    tail = len(data) - 400  # the footer (Parquet, Arrow file) or the last batch (stream)
    cases = truncations(data, [*range(0, 64, 4), *range(tail, len(data), 8)])
    n = 200 if FUZZ_ALL else 70
    cases += flips(data, seed=7, count=n, regions=[(tail, len(data))])
    cases += flips(data, seed=8, count=n)
    if magic is not None:
        cases += forge_fields(data, [_footer_length(data, magic)])
    seen = check(target, cases, tmp_path)
    assert seen["error:FormatError"] > len(cases) // 3


def test_names_that_are_not_utf8(tmp_path: Path) -> None:
    # A flipped byte in a column name: pyarrow opened the file, then raised
    # UnicodeDecodeError wherever a name was read (Parquet: inside ParquetFile()).
    import pyarrow as pa
    import pyarrow.parquet as pq

    from headrace.errors import FormatError
    from headrace.formats import Table

    t = pa.table({"label": pa.array([1, 2, 3]), "nested": pa.array([{"inner": 1}] * 3)})
    pq.write_table(t, tmp_path / "t.parquet")
    with pa.OSFile(str(tmp_path / "t.arrow"), "wb") as sink, pa.ipc.new_stream(sink, t.schema) as w:
        w.write_table(t)
    for name, old in [("t.parquet", b"label"), ("t.arrow", b"label"), ("t.arrow", b"inner")]:
        data = (tmp_path / name).read_bytes()
        bad = tmp_path / f"bad-{old.decode()}-{name}"
        bad.write_bytes(data.replace(old, old[:2] + b"\xd4" + old[3:]))
        with pytest.raises(FormatError, match=rf"bad-{old.decode()}-{name}: .*(UTF-8|utf-8)"):
            Table.open(bad).read_rows([0, 1])


def test_list_values_of_negative_length_fail_without_a_crash(tmp_path: Path) -> None:
    # A flipped byte made a list column's values length negative in a record batch of
    # a mapped Arrow stream: NumPy read outside the buffer and the process died
    # (SIGSEGV). Read in a child process (_harness), where a crash is an outcome.
    data = TARGETS["arrow_stream_lists"].pristine()
    values = sum(map(len, table_ids(range(TABLE_BATCH, 2 * TABLE_BATCH))))  # batch 1
    at = data.index(struct.pack("<q", values), data.index(struct.pack("<q", TABLE_BATCH), 200))
    forged = data[:at] + struct.pack("<q", -values) + data[at + 8 :]
    case = Case(label="batch 1 values length negative", data=forged, strict=True)
    seen = check("arrow_stream_lists", [case], tmp_path)
    assert seen == {"error:FormatError": 1}


def test_a_buffer_cut_mid_item_and_a_name_twice(tmp_path: Path) -> None:
    # Two more the fuzzing found: an offsets buffer whose stated length is no multiple
    # of its 4-byte items (NumPy's ValueError "buffer size must be a multiple of element
    # size"), and a schema that names a column twice (pyarrow's KeyError "Column ... does
    # not exist in schema", for a column that does).
    import io

    import pyarrow as pa

    from headrace.errors import FormatError
    from headrace.formats import Table

    t = pa.table({"text": pa.array(["abc", "de", "fghij"])})
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, t.schema) as w:
        w.write_table(t)
    data = sink.getvalue()
    # The record batch's buffers: validity (0, 0), offsets (0, 16), values (16, 10).
    at = data.index(struct.pack("<qqqq", 0, 16, 16, 10)) + 8
    (tmp_path / "cut.arrow").write_bytes(data[:at] + struct.pack("<q", 18) + data[at + 8 :])
    with pytest.raises(FormatError, match=r"cut\.arrow: column 'text': corrupt data in record"):
        Table.open(tmp_path / "cut.arrow").read_rows([0, 1])
    twice = pa.Table.from_arrays([pa.array([1, 2]), pa.array([3, 4])], names=["a", "a"])
    with pa.OSFile(str(tmp_path / "twice.arrow"), "wb") as f, pa.ipc.new_file(f, twice.schema) as w:
        w.write_table(twice)
    with pytest.raises(FormatError, match=r"twice\.arrow: column 'a' is named 2 times in the"):
        Table.open(tmp_path / "twice.arrow")
