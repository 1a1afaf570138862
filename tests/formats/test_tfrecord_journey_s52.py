"""A TensorFlow vision pipeline's TFRecord shards moved to headrace: shards written by a
writer of this file's own (TFRecord framing and Example wire format from their specs,
as ``tf.io.TFRecordWriter`` and ``Example.SerializeToString`` write them), read back
value for value, and one damaged record: found where it lies, and replaced alike
whatever the reads ask."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headrace.errors import DataError, FormatError
from headrace.formats import FileSource
from headrace.pipeline import Loader, check
from headrace.testing import assert_resume_exact, batch_digest

SHARDS = 3
PER = 12
DIM = 8


def _crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def _masked(data: bytes) -> bytes:
    c = _crc32c(data)
    return struct.pack("<I", ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF)


def _frame(record: bytes) -> bytes:
    head = struct.pack("<Q", len(record))
    return head + _masked(head) + record + _masked(record)


def _varint(v: int) -> bytes:
    v &= (1 << 64) - 1
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    return bytes(out + bytes([v]))


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _example(features: dict[str, tuple[str, Any]]) -> bytes:
    """An Example as protobuf serializes it: int64 and float lists packed."""
    entries = b""
    for key, (kind, value) in features.items():
        if kind == "bytes":  # one value, or a list of them
            values = value if isinstance(value, list) else [value]
            feature = _field(1, b"".join(_field(1, v) for v in values))
        elif kind == "float":
            feature = _field(2, _field(1, np.asarray(value, "<f4").tobytes()))
        else:
            feature = _field(3, _field(1, b"".join(_varint(int(v)) for v in value)))
        entries += _field(1, _field(1, key.encode()) + _field(2, feature))
    return _field(1, entries)


def _shards(root: Path, bad: int | None = None, damage: str = "crc") -> list[dict[str, Any]]:
    """``SHARDS`` shards of ``PER`` Examples as a vision pipeline writes them; record
    ``bad`` of shard 1 damaged: a flipped byte (``"crc"``), or good framing around
    bytes that are not an Example (``"not_example"``)."""
    root.mkdir(exist_ok=True)
    rng = np.random.default_rng(0)
    truth = []
    for s in range(SHARDS):
        body = b""
        for r in range(PER):
            sample = {
                "image/encoded": rng.bytes(int(rng.integers(100, 300))),
                "image/class/label": np.array([rng.integers(-5, 1000)], np.int64),
                "embedding": rng.standard_normal(DIM).astype(np.float32),
            }
            truth.append(sample)
            record = _example(
                {
                    "image/encoded": ("bytes", sample["image/encoded"]),
                    "image/class/label": ("int64", sample["image/class/label"]),
                    "embedding": ("float", sample["embedding"]),
                }
            )
            framed = bytearray(_frame(record))
            if s == 1 and r == bad:
                if damage == "crc":
                    framed[12 + len(record) // 2] ^= 0x40
                else:
                    framed = bytearray(_frame(b"\x0a\x05junk!"))
            body += framed
        (root / f"train.tfrecord-{s:05d}-of-{SHARDS:05d}").write_bytes(body)
    return truth


def _assert_values(src: FileSource, batch: dict[str, Any], truth: list[dict[str, Any]]) -> None:
    for j, i in enumerate(batch["index"].tolist()):
        f, item = (int(x) for x in src.file_item(i))
        want = truth[PER * f + item]
        assert np.asarray(batch["image/encoded"][j]).tobytes() == want["image/encoded"]
        np.testing.assert_array_equal(batch["image/class/label"][j], want["image/class/label"])
        np.testing.assert_array_equal(batch["embedding"][j], want["embedding"])


@pytest.mark.parametrize("shuffle", ["files", "samples"])
def test_every_value_is_the_one_written(tmp_path: Path, shuffle: str) -> None:
    truth = _shards(tmp_path / "d")
    src = FileSource(tmp_path / "d", format="tfrecord", shuffle=shuffle)
    assert src.counts.tolist() == [PER] * SHARDS
    seen = set()
    with Loader(src, batch_size=5, seed=1, epochs=1) as loader:
        for batch in loader:
            assert batch["embedding"].dtype == np.float32
            assert batch["embedding"].shape == (5, DIM)
            assert batch["image/class/label"].dtype == np.int64
            _assert_values(src, batch, truth)
            seen.update(batch["index"][batch["valid"]].tolist())
    assert seen == set(range(SHARDS * PER))


def test_a_read_of_a_whole_shard_checks_the_records_it_asks(tmp_path: Path) -> None:
    # Every read of a shard fetched whole checked the data CRCs of all its records,
    # not of the ones it asked: a shard read in 8 reads was checked 8 times (20 MB,
    # 400 records: 6.6 s against 0.33 s unchecked, where one check takes 1.1 s), and a
    # read of records 0-3 failed on record 7's damage.
    truth = _shards(tmp_path / "d", bad=7)
    src = FileSource(tmp_path / "d", format="tfrecord", shuffle="none")
    got = src.read(0, np.arange(PER, PER + 4))  # shard 1's records 0-3
    _assert_values(src, got, truth)
    with pytest.raises(FormatError, match=r"00001-of-00003: record 7 at offset [\d,]+: its data"):
        src.read(0, np.array([PER + 6, PER + 7]))
    src.close()


def test_check_names_the_damaged_record_alone(tmp_path: Path) -> None:
    # One flipped byte failed every sample of its shard (12 here; 1,250 in an
    # ImageNet shard: past check's most=100, so the shards after it went unchecked).
    _shards(tmp_path / "d", bad=7)
    report = check(FileSource(tmp_path / "d", format="tfrecord"), batch_size=8)
    assert report.samples == SHARDS * PER
    assert len(report.problems) == 1, str(report)
    assert "00001-of-00003: record 7 at offset" in report.problems[0].message


@pytest.mark.parametrize("damage", ["crc", "not_example"])
@pytest.mark.parametrize("above", [0, None])
def test_replace_judges_a_shard_whole_whatever_a_read_asks(
    tmp_path: Path, damage: str, above: int | None
) -> None:
    # Records read by records (or parsed only where asked) judged a shard by the reads
    # that reached the damage: the samples replaced, and so the batches, changed with
    # chunk_steps, and a run resumed at step 1 diverged at step 7.
    _shards(tmp_path / "d", bad=7, damage=damage)

    def loader(chunk_steps: int = 4) -> Loader:
        src = FileSource(
            tmp_path / "d",
            format="tfrecord",
            shuffle="samples",
            on_corrupt="replace",
            max_corrupt=1,
            tfrecord_ranges_above=above,
        )
        return Loader(src, batch_size=4, seed=0, steps=9, chunk_steps=chunk_steps)

    with loader(1) as one, loader(4) as four:
        a, b = list(one), list(four)
        assert batch_digest(a) == batch_digest(b)
        for batch in a:  # every sample of the damaged shard replaced
            files = four.source.file_item(batch["index"])[0]
            assert not (files == 1).any()
    assert_resume_exact(loader, steps=9, resume_at=[1, 5])


def test_replace_judges_an_array_record_file_whole_too(tmp_path: Path) -> None:
    # The same for ArrayRecord (records of an Example each): the samples replaced
    # changed with chunk_steps where one record was not an Example.
    module = pytest.importorskip("array_record.python.array_record_module")
    for s in range(SHARDS):
        writer = module.ArrayRecordWriter(str(tmp_path / f"s{s}.array_record"), "group_size:1")
        for r in range(PER):
            bad = s == 1 and r == 7
            writer.write(b"\x0a\x05junk!" if bad else _example({"x": ("int64", [100 * s + r])}))
        writer.close()

    def loader(chunk_steps: int) -> Loader:
        src = FileSource(
            tmp_path, format="array_record", shuffle="samples", on_corrupt="replace", max_corrupt=1
        )
        return Loader(src, batch_size=4, seed=0, steps=9, chunk_steps=chunk_steps)

    with loader(1) as one, loader(4) as four:
        a, b = list(one), list(four)
        assert batch_digest(a) == batch_digest(b)
        for batch in a:
            assert not (batch["x"][:, 0] // 100 == 1).any()


def test_a_bytes_list_of_several_values_says_to_leave_it_out(tmp_path: Path) -> None:
    # A detection shard (TF's object detection API) holds each box's class name in one
    # bytes_list, beside int64 labels: the refusal offered decode=False (a parser of
    # one's own) alone, where datasets=(...) without that feature reads the rest.
    record = _example(
        {
            "image/encoded": ("bytes", b"\xff\xd8jpeg"),
            "image/object/class/label": ("int64", [3, 7]),
            "image/object/class/text": ("bytes", [b"cat", b"dog"]),
        }
    )
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.tfrecord").write_bytes(_frame(record))
    src = FileSource(tmp_path / "d", format="tfrecord")
    with pytest.raises(DataError) as caught:
        src.read(0, np.array([0]))
    message = str(caught.value)
    assert "'image/object/class/text' is a bytes_list of 2 values" in message
    assert "datasets=('image/encoded', 'image/object/class/label')" in message
    src = FileSource(
        tmp_path / "d",
        format="tfrecord",
        datasets=("image/encoded", "image/object/class/label"),
    )
    got = src.read(0, np.array([0]))
    assert got["image/object/class/label"].tolist() == [[3, 7]]
