"""Where a local Arrow IPC stream ends: the end-of-stream marker of Arrow >= 0.15
(ff ff ff ff 00 00 00 00) or of Arrow < 0.15 (00 00 00 00), at the file's end; a
stream cut at a message's end, or bytes after its marker (two streams in one file),
refused by name rather than read short."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")

from headrace.errors import FormatError  # noqa: E402
from headrace.formats import Table  # noqa: E402


def _stream(legacy: bool = False, dictionary: bool = False, start: int = 0) -> bytes:
    """Two record batches of 3 rows; ``dictionary``: the text dictionary-encoded
    (read by pyarrow's stream reader, not headrace's walk)."""
    text = pa.array(["a", "bb", "a", "ccc", "a", "bb"])
    table = pa.table(
        {
            "id": np.arange(start, start + 6),
            "text": text.dictionary_encode() if dictionary else text,
        }
    )
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(use_legacy_format=legacy)
    with pa.ipc.new_stream(sink, table.schema, options=options) as w:
        for b in table.to_batches(max_chunksize=3):
            w.write_batch(b)
    raw: bytes = sink.getvalue().to_pybytes()
    return raw


KINDS = [(False, False), (False, True), (True, False), (True, True)]
IDS = ["walked", "dictionary", "before-0.15", "before-0.15-dictionary"]


@pytest.mark.parametrize(("legacy", "dictionary"), KINDS, ids=IDS)
@pytest.mark.parametrize("remote", [False, True])  # (a file:// URL: read by ranges)
def test_a_stream_of_every_arrow_release_is_read_whole(
    tmp_path: Path, legacy: bool, dictionary: bool, remote: bool
) -> None:
    # A stream Arrow < 0.15 wrote (or use_legacy_format=True) ends with 00 00 00 00:
    # pyarrow and the object-store path read it; a local path refused it as
    # "truncated: it does not end with the end-of-stream marker ff ff ff ff 00 00 00 00".
    raw = _stream(legacy, dictionary)
    assert raw.endswith(b"\0\0\0\0" if legacy else b"\xff\xff\xff\xff\0\0\0\0")
    path = tmp_path / "s.arrows"
    path.write_bytes(raw)
    table = Table.open(path.as_uri() if remote else str(path))
    try:
        assert table.num_rows == 6
        got = table.read_rows(np.arange(6))
        assert got["id"].tolist() == list(range(6))
    finally:
        table.close()


@pytest.mark.parametrize(("legacy", "dictionary"), KINDS, ids=IDS)
def test_a_stream_cut_at_a_message_end_is_refused(
    tmp_path: Path, legacy: bool, dictionary: bool
) -> None:
    raw = _stream(legacy, dictionary)
    path = tmp_path / "s.arrows"
    path.write_bytes(raw[: -4 if legacy else -8])  # its end marker gone: a partial copy
    with pytest.raises(FormatError, match=r"s.arrows: truncated Arrow IPC stream") as got:
        Table.open(path)
    assert "copy the file again" in str(got.value)


@pytest.mark.parametrize(("legacy", "dictionary"), KINDS, ids=IDS)
def test_two_streams_in_one_file_are_refused_not_read_as_the_first(
    tmp_path: Path, legacy: bool, dictionary: bool
) -> None:
    # `cat a.arrows b.arrows > c.arrows`: pyarrow stops at the first end marker, and
    # the table held the first stream's 6 rows, the second's 6 dropped without a word.
    first = _stream(legacy, dictionary)
    path = tmp_path / "s.arrows"
    path.write_bytes(first + _stream(legacy, dictionary, start=6))
    for where in (str(path), path.as_uri()):  # locally, and by ranges as on S3
        with pytest.raises(
            FormatError,
            match=rf"s.arrows: {len(first)} bytes follow the end-of-stream marker at byte "
            rf"{len(first) - (4 if legacy else 8)} .*one stream to a file",
        ):
            Table.open(where)


def test_zeros_after_the_end_marker_are_refused_as_such(tmp_path: Path) -> None:
    path = tmp_path / "s.arrows"
    path.write_bytes(_stream() + bytes(8))
    with pytest.raises(FormatError, match=r"s.arrows: 8 bytes follow the end-of-stream marker"):
        Table.open(path)


@pytest.mark.parametrize("dictionary", [False, True])
def test_a_cut_stream_of_arrow_before_0_15_is_said_truncated_not_another_format(
    tmp_path: Path, dictionary: bool
) -> None:
    # Before: "not an Arrow IPC or Parquet file: it starts with b'\xa4\x00...' (an Arrow
    # stream starts with ff ff ff ff ...)": its first message has no continuation marker.
    raw = _stream(legacy=True, dictionary=dictionary)
    path = tmp_path / "s.arrows"
    path.write_bytes(raw[: len(raw) - 20])
    with pytest.raises(
        FormatError, match=r"s.arrows: truncated or corrupt Arrow IPC file .*copy the file again"
    ):
        Table.open(path)


def test_a_file_of_another_format_is_still_said_so(tmp_path: Path) -> None:
    path = tmp_path / "s.arrows"
    path.write_bytes(b'{"text": "a json line"}\n' * 4)
    with pytest.raises(FormatError, match=r"s.arrows: not an Arrow IPC or Parquet file"):
        Table.open(path)
