"""A TFRecord shard or ArrayRecord file cut short (an interrupted ``gsutil cp``) or with
a flipped byte, written by the real writers: refused naming the file, the record or
chunk, what was found, and what to do, as other formats' damage says it (until
2026-12-07 these said "the file is truncated" or "damaged" and stopped)."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headrace.errors import FormatError
from headrace.formats import FileSource
from headrace.pipeline import Loader

tfrecord = pytest.importorskip("tfrecord", reason="pip install tfrecord (the test extra has it)")

_FIX = "copy the file again (a partial copy or download?) or leave it out"


def _shard(path: Path, n: int = 6) -> bytes:
    writer = tfrecord.TFRecordWriter(str(path))
    for i in range(n):
        writer.write({"image": (bytes([i]) * 40, "byte"), "label": (i, "int")})
    writer.close()
    return path.read_bytes()


def _refusal(folder: Path, fmt: str, **options: Any) -> str:
    """The refusal, where it comes: the source's count walk, or a read."""
    with pytest.raises(FormatError) as caught:
        src = FileSource(folder, format=fmt, **options)
        with Loader(src, batch_size=6, seed=0) as loader:
            next(iter(loader))
    return str(caught.value)


@pytest.mark.parametrize("cut", [5, 80])  # in the last record's data; in its header
def test_a_cut_tfrecord_shard_says_to_copy_it_again(tmp_path: Path, cut: int) -> None:
    data = _shard(tmp_path / "train-0.tfrecord")
    (tmp_path / "train-0.tfrecord").write_bytes(data[: len(data) - cut])
    msg = _refusal(tmp_path, "tfrecord")
    assert "train-0.tfrecord: record 5 at offset" in msg and "truncated" in msg, msg
    assert msg.endswith(_FIX), msg


def test_a_flipped_byte_in_a_record_says_to_copy_it_again(tmp_path: Path) -> None:
    data = bytearray(_shard(tmp_path / "train-0.tfrecord"))
    (n,) = struct.unpack_from("<Q", data, 0)
    data[12 + n + 4 + 12 + 3] ^= 0x10  # record 1's data
    (tmp_path / "train-0.tfrecord").write_bytes(bytes(data))
    msg = _refusal(tmp_path, "tfrecord", shuffle="samples")
    assert "record 1 at offset" in msg and "data's CRC-32C does not match" in msg, msg
    assert msg.endswith(_FIX), msg


def test_a_cut_array_record_file_says_to_copy_it_again(tmp_path: Path) -> None:
    module = pytest.importorskip("array_record.python.array_record_module")
    path = tmp_path / "train-0.array_record"
    writer = module.ArrayRecordWriter(str(path), "group_size:1")
    for i in range(6):
        writer.write(np.full(8, i, np.int64).tobytes())
    writer.close()
    data = path.read_bytes()
    path.write_bytes(data[:-100])
    msg = _refusal(tmp_path, "array_record", decode=False)
    assert "train-0.array_record" in msg and "truncated" in msg, msg
    assert msg.endswith(_FIX), msg
