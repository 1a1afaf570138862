"""ArrayRecord edge cases (bug hunt s47), on files written by the real array_record
package and damaged here."""

from __future__ import annotations

from pathlib import Path

import pytest

from headrace.errors import FormatError
from headrace.formats._array_record import BLOCK_SIZE, decode_array_record

module = pytest.importorskip(
    "array_record.python.array_record_module",
    reason="pip install array-record (the test extra has it)",
)


def test_a_postscript_of_other_than_three_records_is_not_said_to_disagree_with_the_footer(
    tmp_path: Path,
) -> None:
    # The postscript's count was named as the footer's ("the footer says 3"): the footer
    # is found from the postscript, and says nothing of it.
    path = tmp_path / "p.array_record"
    writer = module.ArrayRecordWriter(str(path), "group_size:2,uncompressed")
    for i in range(5):
        writer.write(b"rec%d" % i)
    writer.close()
    data = bytearray(path.read_bytes())
    tail = len(data) - BLOCK_SIZE
    assert data[tail + 24 + 24 : tail + 24 + 26] == b"\x72\x03"  # a simple chunk, 3 records
    data[tail + 24 + 25] = 2
    with pytest.raises(FormatError) as caught:
        decode_array_record(bytes(data), name="p.array_record", parse=False)
    said = str(caught.value)
    assert "p.array_record: the postscript at offset 65,536 holds 2 records" in said
    assert "footer" not in said
    assert "an ArrayRecord postscript holds 3" in said
