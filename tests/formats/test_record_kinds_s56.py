"""A tf.data or Grain user's records moved to headrace, written by the real writers (the
``tfrecord`` package's ``TFRecordWriter``, array_record's ``ArrayRecordWriter``): a
feature one record holds as another kind of list than the others (an int64 label
written as bytes or a float by one step of a pipeline) is refused by name, not batched
as an ``object`` array that fails steps later (a tensor "of different shapes"); and
records that are not Examples (Grain's pickles) say to read them with ``decode=False``."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headrace.errors import DataError, FormatError
from headrace.formats import FileSource
from headrace.pipeline import Loader

tfrecord = pytest.importorskip("tfrecord", reason="pip install tfrecord (the test extra has it)")
example_pb2 = pytest.importorskip("tfrecord.example_pb2")

PER = 12
ODD = 5  # the record of shard 1 written with another kind of list


def _example(i: int, kind: str = "int") -> bytes:
    ex = example_pb2.Example()
    ex.features.feature["image"].bytes_list.value.append(bytes([i % 256]) * 8)
    label = ex.features.feature["label"]
    if kind == "int":
        label.int64_list.value.append(i % 10)
    elif kind == "float":
        label.float_list.value.append(float(i % 10))
    else:
        label.bytes_list.value.append(str(i % 10).encode())
    return bytes(ex.SerializeToString())


def _tfrecords(folder: Path, kind: str) -> None:
    for k in range(2):
        writer = tfrecord.TFRecordWriter(str(folder / f"train-{k}.tfrecord"))
        for i in range(PER):
            value: Any = i % 10
            tag = "int"
            if k == 1 and i == ODD:
                value, tag = {"float": (float(value), "float"), "bytes": (b"7", "byte")}[kind]
            writer.write({"image": (bytes([i]) * 8, "byte"), "label": (value, tag)})
        writer.close()


def _array_records(folder: Path, kind: str) -> None:
    writer_module = pytest.importorskip("array_record.python.array_record_module")
    for k in range(2):
        writer = writer_module.ArrayRecordWriter(
            str(folder / f"train-{k}.array_record"), "group_size:1"
        )
        for i in range(PER):
            writer.write(_example(i, kind if (k == 1 and i == ODD) else "int"))
        writer.close()


def _read_all(src: FileSource) -> None:
    with Loader(src, batch_size=8, seed=0, epochs=1) as loader:
        for _ in loader:
            pass


@pytest.mark.parametrize("kind", ["bytes", "float"])
@pytest.mark.parametrize("shuffle", ["files", "samples"])
@pytest.mark.parametrize("fmt", ["tfrecord", "array_record"])
def test_a_feature_of_another_list_kind_in_one_record_is_refused_by_name(
    tmp_path: Path, fmt: str, shuffle: str, kind: str
) -> None:
    (_tfrecords if fmt == "tfrecord" else _array_records)(tmp_path, kind)
    src = FileSource(tmp_path, format=fmt, datasets=("image", "label"), shuffle=shuffle)
    with pytest.raises(FormatError) as caught:
        _read_all(src)
    msg = str(caught.value)
    listed = {"bytes": "bytes_list", "float": "float_list"}[kind]
    assert f"train-1.{fmt}" in msg and f"record {ODD}" in msg, msg
    assert "'label'" in msg and listed in msg and "int64_list" in msg, msg
    assert "datasets=" in msg and "decode=False" in msg, msg


def test_one_read_of_the_odd_record_alone_still_batches(tmp_path: Path) -> None:
    """A record is compared with the others a read holds: the odd one read alone (a
    shard of one record) is a batch of its own kind, as before."""
    writer = tfrecord.TFRecordWriter(str(tmp_path / "a.tfrecord"))
    writer.write({"label": (b"7", "byte")})
    writer.close()
    src = FileSource(tmp_path, format="tfrecord", shuffle="samples")
    with Loader(src, batch_size=1, seed=0, steps=1) as loader:
        batch = next(iter(loader))
    assert batch["label"].dtype == np.uint8 and batch["label"].tolist() == [[55]]


@pytest.mark.parametrize("datasets", [("label",), None])
def test_grain_pickles_are_told_to_read_with_decode_false(
    tmp_path: Path, datasets: tuple[str, ...] | None
) -> None:
    """Grain's ArrayRecordDataSource hands over bytes, often pickles: decoded as Examples
    by default here, they were refused with "field number 0 (byte 5)" and no way on."""
    writer_module = pytest.importorskip("array_record.python.array_record_module")
    writer = writer_module.ArrayRecordWriter(str(tmp_path / "a.array_record"), "group_size:1")
    records = [pickle.dumps({"label": i, "text": f"doc {i}"}) for i in range(6)]
    for r in records:
        writer.write(r)
    writer.close()
    src = FileSource(tmp_path, format="array_record", datasets=datasets, shuffle="samples")
    with pytest.raises(DataError) as caught:
        _read_all(src)
    msg = str(caught.value)
    assert "a.array_record" in msg and "record " in msg and "decode=False" in msg, msg
    raw = FileSource(tmp_path, format="array_record", decode=False, shuffle="samples")
    with Loader(raw, batch_size=6, seed=0, steps=1) as loader:
        batch = next(iter(loader))
    got = {int(i): bytes(b) for i, b in zip(batch["index"], batch["bytes"], strict=True)}
    assert got == dict(enumerate(records))


def test_the_fewer_kind_is_named_the_odd_one(tmp_path: Path) -> None:
    """One read of a whole shard: the one bytes_list record is named, not the int64
    record that happened to come first."""
    _tfrecords(tmp_path, "bytes")
    src = FileSource([str(tmp_path / "train-1.tfrecord")], format="tfrecord", shuffle="files")
    with pytest.raises(FormatError) as caught, Loader(src, batch_size=PER, seed=0) as loader:
        next(iter(loader))
    msg = str(caught.value)
    assert f"record {ODD} at offset" in msg and "as a bytes_list (1 of the" in msg, msg
    assert "but record 0 holds it as an int64_list" in msg, msg
