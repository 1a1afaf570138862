"""Edges met migrating from WebDataset and tf.data: records that are not Examples
but parse as ones, and WebDataset's integer fields."""

from __future__ import annotations

import io
import struct
import tarfile
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from headrace.errors import DataError, FormatError
from headrace.formats import FileSource
from headrace.formats._crc32c import crc32c
from headrace.formats._tar import decode_tar, encode_tar, tar_index
from headrace.formats._tfrecord import encode_example, encode_tfrecord, mask, parse_example
from headrace.pipeline import Loader


def _field(n: int, payload: bytes) -> bytes:
    return bytes([(n << 3) | 2, len(payload)]) + payload


def _sequence_example(i: int, *, context: bool) -> bytes:
    """A ``tf.train.SequenceExample`` (context = 1: Features; feature_lists = 2:
    FeatureLists { map<string, FeatureList> }, FeatureList { repeated Feature = 1 }),
    built from its field numbers as TensorFlow serializes it."""
    frame = _field(2, _field(1, np.float32([i, 0.5]).tobytes()))  # a float_list Feature
    frames = _field(1, _field(1, b"frames") + _field(2, _field(1, frame) + _field(1, frame)))
    ctx = _field(1, _field(1, _field(1, b"len") + _field(2, _field(3, _field(1, bytes([i]))))))
    return (ctx if context else b"") + _field(2, frames)


def _read(root: Path, **kw: object) -> list[dict[str, np.ndarray]]:
    src = FileSource(root, format="tfrecord", shuffle="none", **kw)
    try:
        with Loader(src, batch_size=2, seed=0, steps=1) as loader:
            return list(loader)
    finally:
        src.close()


@pytest.mark.parametrize("context", [True, False])
def test_sequence_examples_are_refused_not_read_as_their_context(
    tmp_path: Path, context: bool
) -> None:
    # tf.train.SequenceExample shares field 1 with Example (its context), so a decoder
    # that skips unknown fields read its context alone, the per-step feature_lists
    # (field 2) dropped: without a context, batches of nothing but "index".
    records = [_sequence_example(i, context=context) for i in range(3)]
    (tmp_path / "seq.tfrecord").write_bytes(encode_tfrecord({}, records=records))
    with pytest.raises(
        FormatError,
        match=r"seq\.tfrecord: record 0 at offset 0: .*SequenceExample.*decode=False",
    ):
        _read(tmp_path)
    with pytest.raises(FormatError, match="SequenceExample"):
        parse_example(records[0])
    # Its bytes are still read, for a parser of one's own.
    got = _read(tmp_path, decode=False)
    assert bytes(np.asarray(got[0]["bytes"][0])) == records[0]


@pytest.mark.parametrize(
    "record",
    [
        b"",  # an Example of no features (tf.train.Example().SerializeToString())
        b"x" * 10,  # raw bytes that parse as an Example of unknown fields only
    ],
)
def test_records_of_no_features_are_refused_as_array_record_refuses_them(
    tmp_path: Path, record: bytes
) -> None:
    (tmp_path / "e.tfrecord").write_bytes(encode_tfrecord({}, records=[record] * 3))
    with pytest.raises(
        FormatError,
        match=r"e\.tfrecord: record 0 at offset 0 parses as a tf\.train\.Example of no "
        r"features.*decode=False",
    ):
        _read(tmp_path)


def test_examples_with_unknown_scalar_fields_still_read(tmp_path: Path) -> None:
    # Only a length-delimited field 2 is SequenceExample's; other unknown fields are
    # skipped as protobuf skips them.
    record = encode_example({"x": np.arange(3)}) + bytes([0x38, 3])
    (tmp_path / "u.tfrecord").write_bytes(encode_tfrecord({}, records=[record] * 2))
    (batch,) = _read(tmp_path)
    assert batch["x"].tolist() == [[0, 1, 2]] * 2


def test_webdatasets_inx_field_is_an_integer_as_webdataset_decodes_it(tmp_path: Path) -> None:
    # webdataset's writer and decoder both treat .inx as an integer (as .cls, .index,
    # .id): read as bytes, a label 7 came as [55], its ASCII code, silently.
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for i, text in enumerate([b"7", b"12"]):
            for field, data in (("inx", text), ("txt", b"t")):
                info = tarfile.TarInfo(f"k{i}.{field}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    got = decode_tar(out.getvalue(), name="s.tar", fields=("inx",))
    assert [np.asarray(v).dtype for v in got["inx"]] == [np.int64, np.int64]
    assert [int(v) for v in got["inx"]] == [7, 12]
    # Written back as ASCII, as webdataset writes it.
    again = decode_tar(encode_tar({"inx": np.array([3, 40])}), name="w.tar")
    assert [int(v) for v in again["inx"]] == [3, 40]


def test_uint64_values_past_int64_are_refused_when_written_not_wrapped() -> None:
    # An Example holds int64: 2**64 - 1 was written as -1 without a word (protobuf's
    # Int64List refuses it: "Value out of range").
    with pytest.raises(DataError, match=r"feature 'ids': uint64 value 18446744073709551615"):
        encode_example({"ids": np.array([1, 2**64 - 1], np.uint64)})
    assert parse_example(encode_example({"ids": np.array([2**63 - 1], np.uint64)}))[
        "ids"
    ].tolist() == [2**63 - 1]


def _framed(record: bytes, crc: Callable[[bytes], int]) -> bytes:
    head = struct.pack("<Q", len(record))
    return head + struct.pack("<I", crc(head)) + record + struct.pack("<I", crc(record))


@pytest.mark.parametrize(
    ("crc", "says"),
    [
        # A hand-rolled writer that forgot TFRecord's masking, or used zlib's CRC-32
        # (another polynomial): every record refused as "damaged", which sent one
        # looking for disk faults, not at the writer.
        (lambda b: crc32c(b), r"the plain CRC-32C, not masked"),
        (lambda b: int(mask(np.array([zlib.crc32(b)], np.uint32))[0]), r"zlib's CRC-32"),
        (lambda b: zlib.crc32(b), r"zlib's CRC-32"),
    ],
)
@pytest.mark.parametrize("verify_data_only", [False, True])
def test_a_writer_whose_crcs_are_not_tfrecords_is_named_as_such(
    tmp_path: Path, crc: Callable[[bytes], int], says: str, verify_data_only: bool
) -> None:
    record = encode_example({"x": np.arange(3)})
    if verify_data_only:  # the length's CRC right, the data's made by the other writer
        good = encode_tfrecord({}, records=[record])
        data = good[:-4] + struct.pack("<I", crc(record))
        where = r"record 0 at offset 0: its data's CRC-32C does not match"
    else:
        data = _framed(record, crc)
        where = r"record 0 at offset 0: its length's CRC-32C does not match"
    (tmp_path / "w.tfrecord").write_bytes(data)
    with pytest.raises(FormatError, match=rf"w\.tfrecord: {where}.*{says}.*TFRecordWriter"):
        _read(tmp_path)


def test_a_solaris_pax_header_names_its_member_as_tarfile_reads_it() -> None:
    # Solaris and illumos tar write extended headers as type "X" (tarfile's
    # SOLARIS_XHDTYPE), read as PAX's "x": skipped, a long name fell back to its ustar
    # header's first 100 bytes (refused as "no field" here, or another key and field).
    long = "d/" + "k" * 120
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in (f"{long}.cls", f"{long}.seg.txt"):
            info = tarfile.TarInfo(name)
            info.size = 1
            tar.addfile(info, io.BytesIO(b"5"))
    data = bytearray(out.getvalue())
    pos = 0
    while data[pos : pos + 512] != bytes(512):
        size = int(data[pos + 124 : pos + 136].split(b"\0")[0].strip() or b"0", 8)
        if data[pos + 156] == ord("x"):
            data[pos + 156] = ord("X")
            data[pos + 148 : pos + 156] = b" " * 8
            data[pos + 148 : pos + 156] = b"%06o\0 " % sum(data[pos : pos + 512])
        pos += 512 + -(-size // 512) * 512
    names = [m.name for m in tarfile.open(fileobj=io.BytesIO(bytes(data)))]
    assert names == [f"{long}.cls", f"{long}.seg.txt"]  # tarfile's reading
    index = tar_index(lambda a, n: memoryview(data)[a : a + n], len(data), "s.tar")
    assert [index.key(i) for i in range(len(index))] == [long]
    assert index.names == ("cls", "seg.txt")
