"""A feature one TFRecord/ArrayRecord shard holds, all its records, as another kind of
list than the other shards (an int64 label written as bytes or a float by one step of
a pipeline), written by the real writers (the ``tfrecord`` package's
``TFRecordWriter``, array_record's ``ArrayRecordWriter``): each record was compared
only with the others of its read, so such a shard was never refused: batches mixing
its records with the others' came as ``object`` arrays (a tensor "of different
shapes" in torch, naming no record), and a process reading that shard alone trained
on its bytes. The first file in listing order fixes each feature's kind, in every
process; ``check`` lists what training refuses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headrace.errors import FormatError
from headrace.formats import FileSource
from headrace.pipeline import Loader, check

tfrecord = pytest.importorskip("tfrecord", reason="pip install tfrecord (the test extra has it)")
example_pb2 = pytest.importorskip("tfrecord.example_pb2")

PER = 6


def _example(i: int, kind: str) -> bytes:
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


def _write(folder: Path, fmt: str, kinds: list[list[str]]) -> None:
    """Shard ``k`` of ``kinds``: its records' label kinds."""
    for k, shard in enumerate(kinds):
        path = str(folder / f"train-{k}.{fmt}")
        if fmt == "tfrecord":
            writer: Any = tfrecord.TFRecordWriter(path)
            for i, kind in enumerate(shard):
                value: Any = {"int": i % 10, "float": float(i % 10), "bytes": b"7"}[kind]
                tag = {"int": "int", "float": "float", "bytes": "byte"}[kind]
                writer.write({"image": (bytes([i]) * 8, "byte"), "label": (value, tag)})
        else:
            module = pytest.importorskip("array_record.python.array_record_module")
            writer = module.ArrayRecordWriter(path, "group_size:1")
            for i, kind in enumerate(shard):
                writer.write(_example(i, kind))
        writer.close()


@pytest.mark.parametrize("kind", ["bytes", "float"])
@pytest.mark.parametrize("shuffle", ["files", "samples"])
@pytest.mark.parametrize("fmt", ["tfrecord", "array_record"])
def test_a_shard_of_another_kind_is_refused_naming_both_files(
    tmp_path: Path, fmt: str, shuffle: str, kind: str
) -> None:
    _write(tmp_path, fmt, [["int"] * PER, [kind] * PER])
    src = FileSource(tmp_path, format=fmt, shuffle=shuffle)
    with (
        pytest.raises(FormatError) as caught,
        Loader(src, batch_size=4, seed=0, epochs=1) as loader,
    ):
        for _ in loader:
            pass
    msg = str(caught.value)
    listed = {"bytes": "bytes_list", "float": "float_list"}[kind]
    assert f"train-1.{fmt}: record " in msg and f"train-0.{fmt}: record 0" in msg, msg
    assert "'label'" in msg and listed in msg and "int64_list" in msg, msg
    assert "datasets=('image',)" in msg and "decode=False" in msg, msg


@pytest.mark.parametrize("fmt", ["tfrecord", "array_record"])
def test_a_process_reading_the_odd_shard_alone_is_refused_too(tmp_path: Path, fmt: str) -> None:
    """Another host's (or worker's) share may hold only the odd shard: the first file in
    listing order decides there too, not the first file this process decodes."""
    _write(tmp_path, fmt, [["int"] * PER, ["bytes"] * PER])
    src = FileSource(tmp_path, format=fmt, shuffle="none")
    with pytest.raises(FormatError) as caught:
        src.read(0, np.arange(PER, 2 * PER))  # train-1's records only
    assert f"train-1.{fmt}: record 0 " in str(caught.value), caught.value
    fresh = FileSource(tmp_path, format=fmt, shuffle="none")
    got = fresh.read(0, np.arange(PER))  # train-0's: its own kind, read well
    assert got["label"].dtype == np.int64 and got["label"][:, 0].tolist() == list(range(PER))
    with pytest.raises(FormatError, match=f"train-1.{fmt}: record 2 "):
        fresh.read(0, np.arange(PER + 2, PER + 4))


def test_the_first_shard_of_one_kind_reads_as_before(tmp_path: Path) -> None:
    """Shards all of one kind (bytes labels throughout) are not refused."""
    _write(tmp_path, "tfrecord", [["bytes"] * PER, ["bytes"] * PER])
    src = FileSource(tmp_path, format="tfrecord", shuffle="samples")
    with Loader(src, batch_size=2 * PER, seed=0, steps=1) as loader:
        batch = next(iter(loader))
    assert batch["label"].dtype == np.uint8 and batch["label"].shape == (2 * PER, 1)


@pytest.mark.parametrize(
    "kinds",
    [
        [["int"] * PER, ["int"] * 2 + ["bytes"] + ["int"] * (PER - 3)],  # one odd record
        [["int"] * PER, ["float"] * PER],  # a whole odd shard
    ],
    ids=["record", "shard"],
)
@pytest.mark.parametrize("fmt", ["tfrecord", "array_record"])
def test_check_lists_what_training_refuses(
    tmp_path: Path, fmt: str, kinds: list[list[str]]
) -> None:
    """check read a failing read's records one by one, each of which decoded: it said
    "no problems" of a dataset that training refused."""
    _write(tmp_path, fmt, kinds)
    src = FileSource(tmp_path, format=fmt, shuffle="samples")
    report = check(src, batch_size=4, most=2)
    odd = [PER + i for i, k in enumerate(kinds[1]) if k != "int"]
    assert not report.ok and report.complete, str(report)
    assert [p.sample for p in report.problems] == odd, str(report)
    assert all(p.error == "FormatError" for p in report.problems), str(report)
    # A shard's records, each read alone, are one problem (one line), as most counts
    # them: named a record each, a shard of more than most stopped the check there.
    assert len(report.grouped) == 1, str(report)
    msg = report.problems[0].message
    assert f"train-1.{fmt}: a record read holds feature 'label'" in msg, msg
    assert f"train-0.{fmt}: record 0 holds it as an int64_list" in msg, msg
