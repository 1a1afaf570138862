"""TFRecord files of tf.train.Example records: CRC-32C, the Example decoder, FileSource
reads of real files, and every refusal (file, record number, offset)."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headrace.errors import ConfigError, DataError, FormatError
from headrace.formats import FileSource
from headrace.formats._crc32c import _short, crc32c, crc32c_many
from headrace.formats._tfrecord import (
    decode_tfrecord,
    encode_example,
    encode_tfrecord,
    mask,
    parse_example,
    record_spans,
)
from headrace.pipeline import Loader
from headrace.testing import assert_resume_exact, batch_digest

# -- CRC-32C ------------------------------------------------------------------------------


def test_crc32c_matches_the_published_check_values() -> None:
    # The check value of CRC-32C, and RFC 3720 (iSCSI) B.4's 32 bytes of zeros and of ones.
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(bytes(32)) == 0x8A9136AA
    assert crc32c(b"\xff" * 32) == 0x62A8AB43
    assert crc32c(bytes(range(32))) == 0x46DD794E


def test_crc32c_of_many_lengths_matches_a_byte_at_a_time_table() -> None:
    rng = np.random.default_rng(5)
    lengths = [0, 1, 2, 3, 4, 5, 7, 8, 100, 255, 256, 257, 511, 1000, 4097, 70_001]
    msgs = [rng.integers(0, 256, n, dtype=np.uint8) for n in lengths]
    got = crc32c_many(msgs)
    assert got.tolist() == [_short(m) for m in msgs]


def test_mask_is_tensorflows() -> None:
    c = 0x12345678
    want = ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF
    assert int(mask(np.array([c], np.uint32))[0]) == want


# -- the Example protobuf, against protobuf's own parser ----------------------------------


def _example_class() -> Any:
    """tf.train.Example built from its field numbers with protobuf (no TensorFlow)."""
    pytest.importorskip("google.protobuf")
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    f = descriptor_pb2.FileDescriptorProto(name="hr_example.proto", package="hr", syntax="proto3")
    rep = descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED
    opt = descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL
    t = descriptor_pb2.FieldDescriptorProto
    for name, kind in (
        ("BytesList", t.TYPE_BYTES),
        ("FloatList", t.TYPE_FLOAT),
        ("Int64List", t.TYPE_INT64),
    ):
        m = f.message_type.add(name=name)
        m.field.add(name="value", number=1, label=rep, type=kind)
    feat = f.message_type.add(name="Feature")
    feat.oneof_decl.add(name="kind")
    for i, name in enumerate(("bytes_list", "float_list", "int64_list"), 1):
        type_name = ".hr." + {1: "BytesList", 2: "FloatList", 3: "Int64List"}[i]
        feat.field.add(
            name=name, number=i, label=opt, type=t.TYPE_MESSAGE, type_name=type_name,
            oneof_index=0,
        )  # fmt: skip
    feats = f.message_type.add(name="Features")
    entry = feats.nested_type.add(name="FeatureEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, label=opt, type=t.TYPE_STRING)
    entry.field.add(name="value", number=2, label=opt, type=t.TYPE_MESSAGE, type_name=".hr.Feature")
    feats.field.add(
        name="feature", number=1, label=rep, type=t.TYPE_MESSAGE,
        type_name=".hr.Features.FeatureEntry",
    )  # fmt: skip
    ex = f.message_type.add(name="Example")
    ex.field.add(
        name="features", number=1, label=opt, type=t.TYPE_MESSAGE, type_name=".hr.Features"
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("hr.Example"))


def test_protobufs_examples_parse_as_protobuf_reads_them() -> None:
    example = _example_class()
    e = example()
    e.features.feature["ids"].int64_list.value.extend([0, 1, -1, 2**40, -(2**63), 2**63 - 1])
    e.features.feature["w"].float_list.value.extend([0.5, -1.25, 3e38])
    e.features.feature["img"].bytes_list.value.append(b"\x00\xffjpeg")
    e.features.feature["empty"].int64_list.SetInParent()
    got = parse_example(e.SerializeToString())
    assert got["ids"].dtype == np.int64
    assert got["ids"].tolist() == [0, 1, -1, 2**40, -(2**63), 2**63 - 1]
    assert got["w"].dtype == np.float32
    assert got["w"].tolist() == np.array([0.5, -1.25, 3e38], np.float32).tolist()
    assert got["img"].dtype == np.uint8
    assert got["img"].tobytes() == b"\x00\xffjpeg"
    assert got["empty"].shape == (0,)
    e.features.feature["none"].SetInParent()  # a Feature with no list at all
    with pytest.raises(DataError, match="feature 'none' is empty: it holds no bytes_list"):
        parse_example(e.SerializeToString())
    assert sorted(parse_example(e.SerializeToString(), ["ids", "w"])) == ["ids", "w"]


def test_unpacked_lists_and_unknown_fields_parse() -> None:
    # Hand-made: int64 values one varint field each, a float as fixed32 (wire 5), an
    # unknown field 9 (varint) in the Feature, and an unknown field 7 in the Example.
    def field(n: int, payload: bytes) -> bytes:
        return bytes([(n << 3) | 2, len(payload)]) + payload

    ints = bytes([0x08, 5, 0x08, 0x96, 0x01])  # 5, 150
    floats = bytes([0x0D]) + struct.pack("<f", 2.5)
    f_int = field(3, ints) + bytes([0x48, 1])
    f_float = field(2, floats)
    entries = field(1, field(1, b"a") + field(2, f_int)) + field(
        1, field(1, b"b") + field(2, f_float)
    )
    data = field(1, entries) + bytes([0x38, 3])
    got = parse_example(data)
    assert got["a"].tolist() == [5, 150]
    assert got["b"].tolist() == [2.5]
    other = _example_class()()
    other.ParseFromString(data)
    assert list(other.features.feature["a"].int64_list.value) == [5, 150]


def test_a_message_given_in_parts_is_merged_as_protobuf_merges_it() -> None:
    # Protobuf merges an embedded message given twice: a list in two parts is one list
    # (until 2026-12-06 the last part alone came), another list of the oneof replaces
    # the one before, a map entry's value in two parts is one Feature, and an entry's
    # key given twice keeps the last entry. Hand-made, as TensorFlow never writes them.
    ints = _field(3, _field(1, b"\x01\x02")) + _field(3, _field(1, b"\x03"))
    floats_then_ints = _field(2, _field(1, struct.pack("<f", 1.5))) + _field(3, _field(1, b"\x07"))
    entries = (
        _field(1, _field(1, b"a") + _field(2, ints))
        + _field(1, _field(1, b"b") + _field(2, floats_then_ints))
        + _field(1, _field(1, b"c") + _field(2, _field(1, _field(1, b"ab"))) + _field(2, b""))
        + _field(1, _field(1, b"d") + _field(2, _field(3, _field(1, b"\x09"))))
        + _field(1, _field(1, b"d") + _field(2, _field(3, _field(1, b"\x05"))))
    )
    data = _field(1, entries)
    got = {k: v.tolist() for k, v in parse_example(data).items()}
    assert got == {"a": [1, 2, 3], "b": [7], "c": list(b"ab"), "d": [5]}
    other = _example_class()()
    other.ParseFromString(data)
    f = other.features.feature
    assert list(f["a"].int64_list.value) == [1, 2, 3]
    assert list(f["b"].int64_list.value) == [7]
    assert list(f["c"].bytes_list.value) == [b"ab"]
    assert list(f["d"].int64_list.value) == [5]


@pytest.mark.parametrize("packed", [False, True])
def test_a_varint_past_2_64_reads_as_protobuf_reads_it(packed: bool) -> None:
    # 10 bytes whose last is 0x7f: bits past 2**64, which protobuf drops (-1 here). An
    # unpacked int64 value raised OverflowError; a packed one was dropped the same way.
    def field(n: int, payload: bytes) -> bytes:
        return bytes([(n << 3) | 2, len(payload)]) + payload

    varint = b"\xff" * 9 + b"\x7f"
    ints = field(1, varint) if packed else b"\x08" + varint
    data = field(1, field(1, field(1, b"i") + field(2, field(3, ints))))
    assert parse_example(data)["i"].tolist() == [-1]
    other = _example_class()()
    other.ParseFromString(data)
    assert list(other.features.feature["i"].int64_list.value) == [-1]


def test_our_examples_parse_with_protobuf() -> None:
    example = _example_class()
    e = example()
    e.ParseFromString(
        encode_example({"x": np.array([3, -4]), "f": np.array([1.5], np.float32), "b": b"hi"})
    )
    assert list(e.features.feature["x"].int64_list.value) == [3, -4]
    assert list(e.features.feature["f"].float_list.value) == [1.5]
    assert list(e.features.feature["b"].bytes_list.value) == [b"hi"]


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"\x0a\x05\x0a\x03\x0a\x01", "past the end"),  # lengths longer than the message
        (b"\x0a\x02\x0a\xff", "varint runs past the end"),  # a truncated varint
        (b"\x08\x01", "wire type 0; expected 2"),  # features as a varint
        (b"\x0b", "wire type 3"),  # a group
    ],
)
def test_bytes_that_are_not_an_example_are_refused(data: bytes, says: str) -> None:
    with pytest.raises(FormatError, match=says):
        parse_example(data)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (payloads under 128 bytes)."""
    assert len(payload) < 128
    return bytes([number << 3 | 2, len(payload)]) + payload


def _example(key: bytes, feature: bytes) -> bytes:
    """An Example of one feature: Features{feature: {key: Feature(feature)}}."""
    return _field(1, _field(1, _field(1, key) + _field(2, feature)))


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"\x08" + b"\xff" * 10 + b"\x01", r"a varint is longer than 10 bytes"),
        (b"\x09\x01\x02", r"a fixed64 runs past the end of its message"),
        (b"\x0d\x01", r"a fixed32 runs past the end of its message"),
        (_example(b"x", _field(3, _field(1, b"\x01\x81"))), r"a packed varint runs past the end"),
        (
            _example(b"x", _field(3, _field(1, b"\xff" * 10 + b"\x01"))),
            r"a packed varint is longer than 10 bytes",
        ),
        (
            _example(b"x", _field(2, _field(1, b"\x00\x00\x80"))),
            r"feature 'x': a packed float list of 3 bytes",
        ),
        (_example(b"\xff", _field(3, b"")), r"a feature's name is not UTF-8"),
    ],
)
def test_damaged_varints_fixed_values_and_lists_are_refused(data: bytes, says: str) -> None:
    # Each the protobuf's own damage, named: a record's bytes a CRC let through (written
    # wrong), not decoded into other numbers.
    with pytest.raises(FormatError, match=rf"is not a tf.train.Example: {says}"):
        parse_example(data)
    assert parse_example(_example(b"x", _field(3, _field(1, b"\x01\x7f"))))["x"].tolist() == [
        1,
        127,
    ]


def test_what_an_example_cannot_hold_is_refused_when_written() -> None:
    with pytest.raises(DataError, match=r"feature 'c': cannot write dtype complex128"):
        encode_example({"c": np.array([1j])})
    with pytest.raises(DataError, match=r"one row a record \(got lengths \[2, 3\]\)"):
        encode_tfrecord({"a": np.zeros(2), "b": np.zeros(3)})


# -- files ----------------------------------------------------------------------------------


def _arrays(i: int, n: int = 10) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(i)
    return {
        "ids": rng.integers(-(2**40), 2**40, (n, 3)),
        "w": rng.standard_normal((n, 2)).astype(np.float32),
        "img": rng.integers(0, 256, (n, 16), dtype=np.uint8),
    }


def _write(
    root: Path, files: int = 4, n: int = 10, suffix: str = ".tfrecord"
) -> list[dict[str, np.ndarray]]:
    root.mkdir(parents=True, exist_ok=True)
    written = []
    for i in range(files):
        arrays = _arrays(i, n + i)  # counts differ: 10, 11, 12, 13
        (root / f"shard-{i:02d}{suffix}").write_bytes(encode_tfrecord(arrays))
        written.append(arrays)
    return written


def _digest(src: FileSource, steps: int = 8, **kw: Any) -> str:
    with Loader(src, batch_size=5, seed=3, steps=steps, **kw) as loader:
        return batch_digest(loader)


def test_samples_are_the_records_written(tmp_path: Path) -> None:
    written = _write(tmp_path)
    src = FileSource(tmp_path, format="tfrecord", shuffle="none")
    assert src.counts.tolist() == [10, 11, 12, 13]
    with Loader(src, batch_size=46, seed=0, steps=1) as loader:
        batch = next(iter(loader))
    want = {k: np.concatenate([w[k] for w in written]) for k in ("ids", "w", "img")}
    for k, v in want.items():
        assert batch[k].dtype == v.dtype
        np.testing.assert_array_equal(batch[k], v)
    src.close()


def test_features_are_picked_by_datasets(tmp_path: Path) -> None:
    _write(tmp_path, files=2)
    src = FileSource(tmp_path, format="tfrecord", datasets=("w",))
    with Loader(src, batch_size=4, seed=0, steps=1) as loader:
        assert sorted(next(iter(loader))) == ["index", "w"]
    src.close()


def test_modes_that_must_agree_give_the_same_batches(tmp_path: Path) -> None:
    written = _write(tmp_path)
    counts = [len(w["ids"]) for w in written]
    for shuffle in ("files", "samples"):
        base = FileSource(tmp_path, format="tfrecord", shuffle=shuffle)
        want = _digest(base)
        base.close()
        for kw in (
            {"mode": "map-style"},
            {"decode_threads": 0},
            {"decode_threads": 2},
            {"samples_per_file": counts},
            {"verify": False},
            {"in_flight": 2},
        ):
            src = FileSource(tmp_path, format="tfrecord", shuffle=shuffle, **kw)
            assert _digest(src) == want, (shuffle, kw)
            src.close()


def test_the_extension_names_the_format_and_format_names_any_file(tmp_path: Path) -> None:
    _write(tmp_path / "ext", suffix=".tfrecords")
    _write(tmp_path / "bare", suffix="")  # train-00000-of-01024 style names
    a = FileSource(tmp_path / "ext", format="tfrecord")
    b = FileSource(sorted(str(p) for p in (tmp_path / "bare").iterdir()), format="tfrecord")
    assert _digest(a) == _digest(b)
    a.close()
    b.close()
    with pytest.raises(ConfigError, match="format='tfrecord'"):
        FileSource(tmp_path / "ext")


def test_resume_is_exact_and_epoch_two_differs(tmp_path: Path) -> None:
    _write(tmp_path)
    src = FileSource(tmp_path, format="tfrecord", shuffle="samples")
    assert_resume_exact(lambda: Loader(src, batch_size=7, seed=1), steps=9, resume_at=[0, 4, 9])
    per_epoch = src.samples_per_epoch  # 46: 6 batches of 7 (a partial last one dropped)
    with Loader(src, batch_size=per_epoch, seed=1, steps=2) as loader:
        one, two = (b["index"].tolist() for b in loader)
    assert sorted(one) == sorted(two) == list(range(per_epoch))
    assert one != two
    src.close()


def test_decode_false_gives_each_records_bytes(tmp_path: Path) -> None:
    written = _write(tmp_path, files=2)
    src = FileSource(tmp_path, format="tfrecord", decode=False, shuffle="none")
    with Loader(src, batch_size=3, seed=0, steps=1) as loader:
        batch = next(iter(loader))
    for i in range(3):
        rec = batch["bytes"][i]
        assert rec.dtype == np.uint8
        got = parse_example(rec.tobytes())
        np.testing.assert_array_equal(got["ids"], written[0]["ids"][i])
    src.close()


def test_variable_length_features_come_ragged(tmp_path: Path) -> None:
    records = [encode_example({"t": np.arange(n)}) for n in (3, 1, 4)]
    (tmp_path / "r.tfrecord").write_bytes(encode_tfrecord({}, records=records))
    src = FileSource(tmp_path, format="tfrecord", shuffle="none")
    with Loader(src, batch_size=3, seed=0, steps=1) as loader:
        batch = next(iter(loader))
    assert batch["t"].dtype == object
    assert batch["t_shape"].tolist() == [[3], [1], [4]]
    src.close()


# -- refusals -------------------------------------------------------------------------------


def _file(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "bad.tfrecord"
    path.write_bytes(data)
    return path


def _good(n: int = 3) -> bytearray:
    return bytearray(encode_tfrecord(_arrays(0, n)))


def _record_len(data: bytes, at: int = 0) -> int:
    return int(struct.unpack_from("<Q", data, at)[0])


def _both_readers_refuse(path: Path, match: str, kind: type[Exception] = FormatError) -> None:
    """Decoding the file whole, and counting its records (the header walk), both refuse."""
    with pytest.raises(kind, match=match):
        decode_tfrecord(path.read_bytes(), name=str(path))
    with pytest.raises(kind, match=match):
        FileSource(path.parent, format="tfrecord")


def test_a_damaged_length_is_refused_by_its_crc(tmp_path: Path) -> None:
    data = _good()
    second = 12 + _record_len(data) + 4
    data[second] ^= 0x01
    path = _file(tmp_path, bytes(data))
    _both_readers_refuse(path, rf"bad.tfrecord: record 1 at offset {second:,}: its length's CRC")


def test_damaged_data_is_refused_by_its_crc_unless_verify_is_off(tmp_path: Path) -> None:
    data = _good()
    n = _record_len(data)
    # Inside the first record's bytes_list value: still a parseable Example.
    data[12 + n - 2] ^= 0x01
    path = _file(tmp_path, bytes(data))
    src = FileSource(tmp_path, format="tfrecord")  # the walk reads lengths only
    with pytest.raises(FormatError, match=r"bad.tfrecord: record 0 at offset 0: its data's CRC"):
        _digest(src, steps=1)
    src.close()
    src = FileSource(tmp_path, format="tfrecord", verify=False, shuffle="none")
    with Loader(src, batch_size=1, seed=0, steps=1) as loader:
        assert next(iter(loader))["w"][0, -1] != _arrays(0, 3)["w"][0, -1]
    src.close()
    assert path.exists()


def test_a_truncated_file_is_refused(tmp_path: Path) -> None:
    data = _good()
    second = 12 + _record_len(data) + 4
    _both_readers_refuse(
        _file(tmp_path, bytes(data[: second + 20])),
        rf"record 1 at offset {second:,} says \d+ bytes of data, running past the end",
    )
    _both_readers_refuse(
        _file(tmp_path, bytes(data[: second + 7])),
        rf"record 1 at offset {second:,} is truncated: its 12-byte header",
    )


@pytest.mark.parametrize("length", [1 << 40, 1 << 63, (1 << 64) - 1])
def test_a_forged_length_beyond_the_file_is_refused(tmp_path: Path, length: int) -> None:
    # Lengths past 2**63 are negative in int64 (the ArrayRecord case): summed as Python
    # ints here, they run past the end, not back into the file.
    data = _good()
    head = struct.pack("<Q", length)  # with its CRC made right: only the size says
    data[0:8] = head
    data[8:12] = struct.pack("<I", int(mask(np.array([crc32c(head)], np.uint32))[0]))
    _both_readers_refuse(
        _file(tmp_path, bytes(data)), f"record 0 at offset 0 says {length:,} bytes"
    )


def test_a_record_that_is_not_an_example_is_refused_by_number(tmp_path: Path) -> None:
    records = [encode_example({"x": np.arange(2)}), b"\x0a\x02\x0a\xff"]
    path = _file(tmp_path, encode_tfrecord({}, records=records))
    src = FileSource(tmp_path, format="tfrecord", shuffle="none")
    with pytest.raises(
        FormatError,
        match=r"bad.tfrecord: record 1 at offset \d+: is not a tf.train.Example: a varint",
    ):
        _digest(src, steps=1)
    src.close()
    assert path.exists()


def test_a_missing_feature_names_file_record_and_feature(tmp_path: Path) -> None:
    records = [encode_example({"x": np.arange(2), "y": np.ones(1)}), encode_example({"x": [1]})]
    _file(tmp_path, encode_tfrecord({}, records=records))
    src = FileSource(tmp_path, format="tfrecord", datasets=("x", "y"), shuffle="none")
    with pytest.raises(
        DataError, match=r"bad.tfrecord: record 1 at offset \d+: no feature\(s\) \['y'\]"
    ):
        _digest(src, steps=1)
    src.close()
    plain = FileSource(tmp_path, format="tfrecord", shuffle="none")
    with pytest.raises(FormatError, match=r"record 1 at offset \d+ holds features \['x'\]"):
        _digest(plain, steps=1)
    plain.close()


def test_a_bytes_list_of_several_values_is_refused(tmp_path: Path) -> None:
    def field(n: int, payload: bytes) -> bytes:
        return bytes([(n << 3) | 2, len(payload)]) + payload

    feature = field(1, field(1, b"ab") + field(1, b"c"))
    record = field(1, field(1, field(1, b"tags") + field(2, feature)))
    _file(tmp_path, encode_tfrecord({}, records=[record]))
    src = FileSource(tmp_path, format="tfrecord")
    with pytest.raises(
        DataError, match=r"record 0 at offset 0: feature 'tags' is a bytes_list of 2"
    ):
        _digest(src, steps=1)
    src.close()


def test_gzip_files_are_refused_with_what_to_do(tmp_path: Path) -> None:
    path = _file(tmp_path, gzip.compress(bytes(_good()), mtime=0))
    _both_readers_refuse(path, "is gzip-compressed .* gunzip it first")


def test_options_of_other_formats_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="verify=False skips TFRecord"):
        FileSource(tmp_path, format="npy", verify=False)


# -- read by records (shuffle="samples") -----------------------------------------------------


def test_reads_by_records_give_the_whole_files_batches(tmp_path: Path) -> None:
    _write(tmp_path)
    whole = FileSource(tmp_path, format="tfrecord", shuffle="samples", tfrecord_ranges_above=None)
    ranged = FileSource(tmp_path, format="tfrecord", shuffle="samples", tfrecord_ranges_above=0)
    assert type(ranged._by_rows).__name__ == "RangedTfrecord"
    assert whole._by_rows is None
    assert _digest(ranged, steps=12) == _digest(whole, steps=12)
    for kw in ({"decode": False}, {"datasets": ("img",)}, {"verify": False}):
        a = FileSource(
            tmp_path, format="tfrecord", shuffle="samples", tfrecord_ranges_above=0, **kw
        )
        b = FileSource(tmp_path, format="tfrecord", shuffle="samples", **kw)
        assert _digest(a) == _digest(b), kw
        a.close()
        b.close()
    assert_resume_exact(lambda: Loader(ranged, batch_size=7, seed=1), steps=6, resume_at=[0, 3])
    ranged.close()
    whole.close()


def test_local_files_from_1_mib_are_read_by_records_by_default(tmp_path: Path) -> None:
    # Faster than whole files at 1, 2 and 4 MiB (a whole file's every record is
    # checked): locally from 1 MiB, not from NPY's 3.5 MiB.
    for records, by_records in ((15, False), (16, True)):  # 64 KiB records: under, over 1 MiB
        (tmp_path / "0.tfrecord").write_bytes(
            encode_tfrecord({}, records=[bytes(64 << 10)] * records)
        )
        src = FileSource(tmp_path, format="tfrecord", shuffle="samples")
        assert (src._by_rows is not None) == by_records, records


def test_a_read_by_records_holds_only_the_records_asked(tmp_path: Path) -> None:
    _write(tmp_path, files=1, n=40)
    src = FileSource(tmp_path, format="tfrecord", shuffle="samples", tfrecord_ranges_above=0)
    assert src._by_rows is not None
    image = src._by_rows.image(0, np.array([3, 30]))
    starts, lengths = image.records
    assert len(starts) == 40
    # Records 3 and 30, header to CRC, are held (and the gap between, one read); not
    # the records before or after them.
    first, last = int(starts[3]) - 12, int(starts[30] + lengths[30]) + 4
    assert image.missing(first, last) == []
    assert image.missing(0, first) == [(0, first)]
    assert image.missing(last, image.size) == [(last, image.size)]
    got = src.decoder.decode(0, image, rows=np.array([3, 30]))
    np.testing.assert_array_equal(got["ids"][1], _arrays(0, 40)["ids"][30])
    src.close()


def test_a_damaged_record_read_by_records_is_refused(tmp_path: Path) -> None:
    data = _good(20)
    starts, lengths = record_spans(memoryview(bytes(data)), "good")
    at = int(starts[5]) - 12
    data[int(starts[5] + lengths[5]) - 2] ^= 0x01  # record 5's last float
    _file(tmp_path, bytes(data))
    src = FileSource(tmp_path, format="tfrecord", shuffle="samples", tfrecord_ranges_above=0)
    assert src._by_rows is not None
    image = src._by_rows.image(0, np.array([5]))
    with pytest.raises(FormatError, match=rf"record 5 at offset {at:,}: its data's CRC"):
        src.decoder.decode(0, image, rows=np.array([5]))
    image = src._by_rows.image(0, np.array([4, 6]))  # its neighbours are fine
    assert len(src.decoder.decode(0, image, rows=np.array([4, 6]))["ids"]) == 2
    src.close()


def test_iterable_workers_read_the_same_records(tmp_path: Path) -> None:
    from headrace.formats import IterableFiles
    from headrace.formats._file_samples import sample_digests

    _write(tmp_path)
    for above in (None, 0):  # whole shards; shards read by records (read whole here too)
        src = FileSource(
            tmp_path, format="tfrecord", shuffle="samples", tfrecord_ranges_above=above
        )
        got = []
        for w in range(2):
            it = IterableFiles(src, batch_size=1, worker=w, num_workers=2, in_flight=2)
            got += [d for b in it.epoch(seed=5, epoch=0) for d in sample_digests(b)]
        with Loader(src, batch_size=46, seed=5, steps=1) as loader:
            want = [d for b in loader for d in sample_digests(b)]
        assert sorted(got) == sorted(want) and len(want) == 46
        src.close()


def test_bad_options_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="verify must be True or False"):
        FileSource(tmp_path, format="tfrecord", verify="no")
    with pytest.raises(ConfigError, match="tfrecord_ranges_above must be a size"):
        FileSource(tmp_path, format="tfrecord", tfrecord_ranges_above=-1)


def test_counts_given_that_are_wrong_name_the_shard(tmp_path: Path) -> None:
    _write(tmp_path)  # 10, 11, 12, 13 records
    src = FileSource(tmp_path, format="tfrecord", samples_per_file=[10, 11, 12, 14])
    with pytest.raises(DataError, match=r"shard-03.tfrecord: .*13.*\b14\b"):
        _digest(src, steps=10)
    src.close()


def test_the_index_is_the_counts_walk_or_walked_at_a_shards_first_read(tmp_path: Path) -> None:
    from headrace.formats._tfrecord_ranges import RangedTfrecord

    _write(tmp_path)
    counted = FileSource(tmp_path, format="tfrecord", shuffle="samples", tfrecord_ranges_above=0)
    assert isinstance(counted._by_rows, RangedTfrecord)
    assert sorted(counted._by_rows._kept) == [0, 1, 2, 3]  # from the count's walk
    given = FileSource(
        tmp_path,
        format="tfrecord",
        shuffle="samples",
        tfrecord_ranges_above=0,
        samples_per_file=[10, 11, 12, 13],
    )
    assert isinstance(given._by_rows, RangedTfrecord)
    assert not given._by_rows._kept  # no walk before the first read
    assert _digest(given) == _digest(counted)
    assert given._by_rows._kept
    for f, (starts, lengths) in counted._by_rows._kept.items():
        want = record_spans(memoryview((tmp_path / f"shard-{f:02d}.tfrecord").read_bytes()), "x")
        np.testing.assert_array_equal(starts, want[0])
        np.testing.assert_array_equal(lengths, want[1])
    counted.close()
    given.close()


def test_a_pickled_copy_keeps_the_record_indexes(tmp_path: Path) -> None:
    import pickle

    from headrace.formats._tfrecord_ranges import RangedTfrecord

    _write(tmp_path)
    src = FileSource(tmp_path, format="tfrecord", shuffle="samples", tfrecord_ranges_above=0)
    copy = pickle.loads(pickle.dumps(src))
    assert isinstance(src._by_rows, RangedTfrecord)
    assert isinstance(copy._by_rows, RangedTfrecord)
    assert sorted(copy._by_rows._kept) == [0, 1, 2, 3]
    for f, (starts, lengths) in src._by_rows._kept.items():
        np.testing.assert_array_equal(copy._by_rows._kept[f][0], starts)
        np.testing.assert_array_equal(copy._by_rows._kept[f][1], lengths)
    assert _digest(copy) == _digest(src)
    copy.close()
    src.close()


def test_a_folder_of_gzipped_tfrecords_says_to_gunzip(tmp_path: Path) -> None:
    # Listed by extension, a folder of only `.tfrecord.gz` held "no tfrecord files":
    # the message now says why they are left out and what to do.
    (tmp_path / "train.tfrecord.gz").write_bytes(gzip.compress(bytes(_good()), mtime=0))
    with pytest.raises(DataError, match=r"it holds 1 \.gz; a GZIP-compressed TFRecord .* gunzip"):
        FileSource(tmp_path, format="tfrecord")


def test_an_index_past_the_bound_is_kept_alone_not_walked_at_every_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A file of more records than the bound holds (16 MiB: ~1M records) was walked again
    # at every read by records; it is kept, alone.
    from headrace.formats import _tfrecord_ranges

    monkeypatch.setattr(_tfrecord_ranges, "INDEX_BYTES", 100)  # under one file's index
    _write(tmp_path, files=2, n=20)
    src = FileSource(
        tmp_path,
        format="tfrecord",
        shuffle="samples",
        tfrecord_ranges_above=0,
        samples_per_file=[20, 20],
    )
    ranged = src._by_rows
    assert isinstance(ranged, _tfrecord_ranges.RangedTfrecord)
    walks: list[str] = []
    walk = ranged.walk
    monkeypatch.setattr(
        ranged, "walk", lambda at, size, name: walks.append(name) or walk(at, size, name)
    )
    for rows in ([1, 2], [5], [19, 0]):
        ranged.image(0, np.array(rows))
    assert len(walks) == 1 and list(ranged._kept) == [0]
    ranged.image(1, np.array([3]))  # another file's index takes its place
    assert len(walks) == 2 and list(ranged._kept) == [1]
    src.close()


def test_a_tfds_folder_reads_its_shards_by_their_tfds_names(tmp_path: Path) -> None:
    # TensorFlow Datasets writes "NAME-SPLIT.tfrecord-00000-of-00002" beside its JSON: the
    # folder read "no files ending in ['.tfrecord', '.tfrecords']" until 2026-12-06.
    names = ["mnist-test.tfrecord-00000-of-00001"]
    names += [f"mnist-train.tfrecord-{i:05d}-of-00002" for i in range(2)]
    written = []
    for i, name in enumerate(names):
        written.append(_arrays(i, 10 + i))
        (tmp_path / name).write_bytes(encode_tfrecord(written[-1]))
    (tmp_path / "dataset_info.json").write_text("{}")
    (tmp_path / "features.json").write_text("{}")
    src = FileSource(tmp_path, format="tfrecord", shuffle="none")
    assert list(src.files.keys) == names and src.counts.tolist() == [10, 11, 12]
    with Loader(src, batch_size=33, seed=0, steps=1) as loader:
        batch = next(iter(loader))
    np.testing.assert_array_equal(batch["ids"], np.concatenate([w["ids"] for w in written]))
    src.close()
    train = FileSource(str(tmp_path / "*-train.tfrecord-*"), format="tfrecord")  # one split
    assert [Path(k).name for k in train.files.keys] == names[1:]
    train.close()
