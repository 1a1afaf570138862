"""Shards as their own tools write them, read by headrace (journey s50): TFRecord."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from headrace.errors import FormatError
from headrace.formats import FileSource
from headrace.formats._tfrecord import encode_example, encode_tfrecord


def _shards(tmp_path: Path) -> str:
    for f in range(3):
        recs = [encode_example({"id": np.array([f * 10 + i])}) for i in range(10)]
        (tmp_path / f"train-{f:05d}-of-00003").write_bytes(encode_tfrecord({}, records=recs))
    return str(tmp_path / "train-*-of-00003")


def _damage_record_0(tmp_path: Path) -> None:
    p = tmp_path / "train-00001-of-00003"
    d = bytearray(p.read_bytes())
    d[20] ^= 1  # inside record 0's data: its data CRC-32C no longer matches
    p.write_bytes(bytes(d))


def test_a_bad_data_crc_is_refused_naming_the_shard_and_record(tmp_path: Path) -> None:
    glob = _shards(tmp_path)
    _damage_record_0(tmp_path)
    src = FileSource(glob, format="tfrecord", shuffle="none")
    assert src.read(0, np.array([0]))["id"].ravel().tolist() == [0]
    with pytest.raises(FormatError, match=r"train-00001-of-00003: record 0 .*data's CRC-32C"):
        src.read(0, np.array([10]))
    src.close()
