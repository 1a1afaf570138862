"""Damaged local table files whose damage only shows past the checks that open them: an
Arrow IPC stream whose record batch header places a buffer where pyarrow cannot read it
(the walk of its headers names the message), and a Parquet row group whose data page's
dictionary indices run past its dictionary (the read of that group names it). Each file
is written by pyarrow and damaged at a place computed from its format."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest

import _ipc_bytes as ipc_bytes
from headrace.errors import FormatError
from headrace.formats import Ragged, Table

ROWS = 200
RECOPY = r"copy the file again \(a partial copy or download\?\) or leave it out"


def _table() -> pa.Table:
    return pa.table(
        {"x": np.arange(ROWS, dtype=np.int64), "s": [f"row{i:04d}" for i in range(ROWS)]}
    )


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        # x's values (buffer 1: x's validity is buffer 0) 4 bytes in: off the 8-byte grid.
        ("misaligned", r"8-byte aligned"),
        # s's values (buffer 4) 5000 bytes long, in a body of a few hundred.
        ("past-the-body", r"expected to be able to read 5000 bytes"),
    ],
)
def test_a_stream_whose_record_batch_places_a_buffer_pyarrow_cannot_read_names_the_message(
    tmp_path: Path, damage: str, says: str
) -> None:
    path = tmp_path / "s.arrow"
    with ipc.new_stream(path, _table().schema) as w:
        w.write_table(_table(), max_chunksize=ROWS // 2)
    raw = bytearray(path.read_bytes())
    kinds = ipc_bytes.messages(bytes(raw))
    assert [k for _, k in kinds] == ["schema", "record batch", "record batch"]
    at = kinds[2][0]  # the second record batch: its header reads, its buffers do not
    if damage == "misaligned":
        entry = ipc_bytes.buffer_entry(raw, at, 1)
        offset, length = struct.unpack_from("<qq", raw, entry)
        struct.pack_into("<qq", raw, entry, offset + 4, length)
    else:
        entry = ipc_bytes.buffer_entry(raw, at, 4)
        offset, _ = struct.unpack_from("<qq", raw, entry)
        struct.pack_into("<qq", raw, entry, offset, 5000)
    path.write_bytes(bytes(raw))
    with pytest.raises(
        FormatError,
        match=rf"s\.arrow: truncated or corrupt Arrow IPC stream: the record batch at byte "
        rf"{at} \(.*{says}.*\): {RECOPY}",
    ):
        Table.open(path)


def test_a_parquet_row_group_whose_dictionary_indices_run_past_its_dictionary_names_the_group(
    tmp_path: Path,
) -> None:
    path = tmp_path / "d.parquet"
    pq.write_table(
        _table(), path, row_group_size=ROWS // 2, compression="none", use_dictionary=["s"]
    )
    # Row group 1's chunk of s: a dictionary page of its 100 strings, then a data page
    # that ends in the strings' indices, bit-packed 7 bits each. Its last 8 bytes set to
    # ff: indices of 127 in a dictionary of 100 (pyarrow: ArrowInvalid, not an OSError).
    chunk = pq.ParquetFile(path).metadata.row_group(1).column(1)
    assert chunk.path_in_schema == "s" and chunk.has_dictionary_page
    end = chunk.dictionary_page_offset + chunk.total_compressed_size
    raw = bytearray(path.read_bytes())
    raw[end - 8 : end] = b"\xff" * 8
    path.write_bytes(bytes(raw))
    table = Table.open(path)  # the footer is intact
    s = table.read_rows([0, 99], ["s"])["s"]  # so is row group 0
    assert isinstance(s, Ragged) and s.values.tobytes() == b"row0000row0099"
    x = table.read_rows([150], ["x"])["x"]  # and row group 1's other column
    assert isinstance(x, np.ndarray) and x.tolist() == [150]
    with pytest.raises(
        FormatError,
        match=rf"d\.parquet: row group 1: truncated or corrupt Parquet data "
        rf"\(Index not in dictionary bounds\): {RECOPY}",
    ):
        table.read_rows([150], ["s"])
    table.close()


def test_the_buffers_the_damage_above_aims_at_are_those_pyarrow_wrote(tmp_path: Path) -> None:
    path = tmp_path / "s.arrow"
    with ipc.new_stream(path, _table().schema) as w:
        w.write_table(_table(), max_chunksize=ROWS // 2)
    raw = path.read_bytes()
    at = ipc_bytes.messages(raw)[1][0]
    entries = [struct.unpack_from("<qq", raw, ipc_bytes.buffer_entry(raw, at, k)) for k in range(5)]
    # x: no validity (0 bytes), 100 int64; s: no validity, 101 int32 offsets, the values
    # (700 bytes, padded to the body's 8-byte end).
    assert [n for _, n in entries] == [0, 800, 0, 404, 704]
    body = at + 8 + ipc_bytes.u32(raw, at + 4)
    offset = entries[4][0]
    assert raw[body + offset : body + offset + 700] == b"".join(b"row%04d" % i for i in range(100))
