"""Damaged Arrow IPC objects on a real S3 endpoint (moto on 127.0.0.1) whose damage only
shows past the checks that open them: a dictionary batch whose message has no header (the
walk of the headers names it), a token list column whose header gives its row offsets
too few bytes (table_token_files names the record batch), and a record batch that the
store serves with another row count than the header the walk read (a fault the store
injects: the bytes of another version of the object under the same size and ETag). Each
object is written by pyarrow and damaged at a place computed from its format. And one
whose damage is none to headrace: a string that is not UTF-8 reads as its bytes, as the
local copy's does."""

from __future__ import annotations

import re
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest
from s3util import BUCKET, S3Fixture
from s3util import store_options as options

import _ipc_bytes as ipc_bytes
from headrace.errors import FormatError
from headrace.formats import Ragged, Table, TableSource, table_token_files
from headrace.io import ObjectStore

pytestmark = pytest.mark.integration

Put = Callable[[Path], str]
RECOPY = r"copy the file again \(a partial copy or download\?\) or leave it out"


@pytest.fixture(scope="module")
def put(s3: S3Fixture) -> Put:
    """Uploads a local file under ``error-paths-tables/`` and returns its URL."""
    client = s3.server.info.boto3_client()

    def put(path: Path) -> str:
        key = f"error-paths-tables/{path.name}"
        client.put_object(Bucket=BUCKET, Key=key, Body=path.read_bytes())
        return f"s3://{BUCKET}/{key}"

    return put


def test_a_dictionary_batch_without_a_header_is_named_when_the_object_is_opened(
    s3: S3Fixture, put: Put, tmp_path: Path
) -> None:
    cat = pa.array([f"c{i % 5}" for i in range(100)]).dictionary_encode()
    t = pa.table({"label": np.arange(100, dtype=np.int64), "cat": cat})
    path = tmp_path / "dictionary.arrow"
    with ipc.new_stream(path, t.schema) as w:
        w.write_table(t)
    raw = bytearray(path.read_bytes())
    kinds = ipc_bytes.messages(bytes(raw))
    assert [k for _, k in kinds] == ["schema", "dictionary", "record batch"]
    at = kinds[1][0]
    # The dictionary message's vtable: its header's place zeroed, the header is absent.
    slot = ipc_bytes.slot(raw, ipc_bytes.message(raw, at), 2)
    assert struct.unpack_from("<H", raw, slot)[0]
    struct.pack_into("<H", raw, slot, 0)
    path.write_bytes(bytes(raw))
    url = put(path)
    with pytest.raises(
        FormatError,
        match=rf"{re.escape(url)}: corrupt Arrow IPC message at byte {at}: "
        r"a dictionary batch without a header",
    ):
        Table.open(url, store_options=options(s3))


@pytest.mark.parametrize("window_rows", [500, None], ids=["sub-windows", "whole"])
def test_a_string_that_is_not_utf8_reads_as_its_bytes_as_the_local_copy_does(
    s3: S3Fixture, put: Put, tmp_path: Path, window_rows: int | None
) -> None:
    # Strings come as their bytes, and pyarrow's read of a local file checks no UTF-8:
    # the remote read, which validates what the network brought, refused the row as
    # corrupt until 2026-12-06 (in a sub-window, and in a whole record batch).
    rows = 2_000
    t = pa.table(
        {
            "label": np.arange(rows, dtype=np.int64),
            "text": [f"row {k:05d}" for k in range(rows)],
        }
    )
    path = tmp_path / f"utf8-{window_rows}.arrow"
    with ipc.new_file(path, t.schema) as w:
        w.write_table(t, max_chunksize=rows)  # one record batch
    raw = bytearray(path.read_bytes())
    at = raw.find(b"row 01234")
    assert at > 0 and raw.count(b"row 01234") == 1
    raw[at] = 0xFF  # row 1234's first byte: no UTF-8 sequence starts with it
    path.write_bytes(bytes(raw))
    url = put(path)
    kw: dict[str, Any] = {"columns": ["label", "text"], "width": 16, "shuffle": "window"}
    if window_rows is not None:
        kw["window_rows"] = window_rows
    remote = TableSource(url, store_options=options(s3), **kw)
    local = TableSource(str(path), **kw)
    for src in (remote, local):
        text = src.table.read_rows([1233, 1234], ["text"])["text"]
        assert isinstance(text, Ragged)
        assert text.values.tobytes() == b"row 01233\xffow 01234"
    samples = np.arange(rows, dtype=np.int64)
    got, want = remote.read(0, samples), local.read(0, samples)
    for c in ("label", "text", "text_mask"):
        np.testing.assert_array_equal(got[c], want[c])
    remote.close()
    local.close()


def test_token_lists_whose_header_gives_their_row_offsets_too_few_bytes_are_named(
    s3: S3Fixture, put: Put, tmp_path: Path
) -> None:
    rng = np.random.default_rng(0)
    ids = [rng.integers(0, 1_000, k).astype(np.int32) for k in rng.integers(1, 20, 100)]
    t = pa.table({"input_ids": pa.array(ids, pa.list_(pa.int32()))})
    path = tmp_path / "tokens.arrow"
    with ipc.new_stream(path, t.schema) as w:
        w.write_table(t, max_chunksize=50)
    url = put(path)
    files = table_token_files(url, store_options=options(s3))  # undamaged: packed
    assert files[0].num_tokens == sum(len(x) for x in ids)
    raw = bytearray(path.read_bytes())
    kinds = ipc_bytes.messages(bytes(raw))
    assert [k for _, k in kinds] == ["schema", "record batch", "record batch"]
    at = kinds[2][0]
    # input_ids' buffers: its validity (0), its row offsets (1), the ids' validity and
    # values. The offsets of 50 rows are 51 int32; the header now says 8 bytes (inside
    # the body, so the walk passes it).
    entry = ipc_bytes.buffer_entry(raw, at, 1)
    offset, length = struct.unpack_from("<qq", raw, entry)
    assert length == 51 * 4
    struct.pack_into("<qq", raw, entry, offset, 8)
    bad = tmp_path / "short-offsets.arrow"
    bad.write_bytes(bytes(raw))
    url = put(bad)
    with pytest.raises(
        FormatError,
        match=r"short-offsets\.arrow: record batch 1: 8 bytes of row offsets for 50 rows",
    ):
        table_token_files(url, store_options=options(s3))


def test_a_record_batch_served_with_other_rows_than_its_header_said_at_open_is_named(
    s3: S3Fixture, put: Put, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two versions of an IPC file of one int8 column: 100 rows and 97, both bodies 104
    # bytes (8-byte padding), so the files are the same size. The walk reads the first's
    # header; then the store serves the second's bytes (the same size; a fault: an ETag
    # would differ on S3, and moto has no way to serve one under the other's).
    paths = []
    for n in (100, 97):
        t = pa.table({"x": np.arange(n, dtype=np.int8)})
        (tmp_path / str(n)).mkdir()
        paths.append(tmp_path / str(n) / "rows.arrow")
        with ipc.new_file(paths[-1], t.schema) as w:
            w.write_table(t)
    other = paths[1].read_bytes()
    assert len(other) == paths[0].stat().st_size
    url = put(paths[0])
    table = Table.open(url, store_options=options(s3))
    assert table.num_rows == 100
    real = ObjectStore.aread_into

    async def served(
        self: ObjectStore, key: str, offset: int, out: Any, *, expect: Any = None
    ) -> None:
        await real(self, key, offset, out, expect=expect)
        if key.endswith("rows.arrow"):  # (keys are relative to the store's prefix)
            dest = np.frombuffer(out, np.uint8)
            dest[:] = np.frombuffer(other, np.uint8, dest.size, offset)

    monkeypatch.setattr(ObjectStore, "aread_into", served)
    with pytest.raises(
        FormatError,
        match=r"rows\.arrow: record batch 0 holds 97 rows; its header, read when the file "
        r"was opened, said 100",
    ):
        table.read_rows([0], ["x"])
    table.close()
