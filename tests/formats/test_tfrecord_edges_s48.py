"""TFRecord edges: a first record whose length reads as gzip's magic, counts given
that are wrong when read by records."""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np
import pytest

from headrace.errors import DataError, FormatError
from headrace.formats import FileSource
from headrace.formats._tfrecord import decode_tfrecord, encode_example, encode_tfrecord
from headrace.pipeline import Loader
from headrace.testing import batch_digest


def _record_of(size: int) -> tuple[bytes, int]:
    """An Example of one bytes feature, exactly ``size`` bytes serialized, and the
    feature's length."""
    record = encode_example({"b": np.zeros(size - 20, np.uint8)})
    n = 2 * size - 20 - len(record)
    record = encode_example({"b": np.zeros(n, np.uint8)})
    assert len(record) == size
    return record, n


@pytest.mark.parametrize("ranged", [0, None])
def test_a_first_record_of_0x8b1f_bytes_is_not_taken_for_gzip(
    tmp_path: Path, ranged: int | None
) -> None:
    # Its length's little-endian bytes start 1f 8b, gzip's magic: the file was refused
    # as gzip-compressed, though its length's CRC says it is a TFRecord header.
    first, n = _record_of(0x8B1F)
    data = encode_tfrecord({}, records=[first, encode_example({"b": np.arange(3, dtype=np.uint8)})])
    assert data[:2] == b"\x1f\x8b"
    got = decode_tfrecord(data, name="x.tfrecord")
    assert [len(v) for v in got["b"]] == [n, 3]
    (tmp_path / "x.tfrecord").write_bytes(data)
    for where in (tmp_path, f"file://{tmp_path}/*.tfrecord"):  # file://: as objects are
        src = FileSource(where, format="tfrecord", shuffle="samples", tfrecord_ranges_above=ranged)
        assert src.counts.tolist() == [2]
        with Loader(src, batch_size=2, seed=0, steps=1) as loader:
            assert len(next(iter(loader))["b"]) == 2
        src.close()


def test_a_gzip_file_is_still_refused_as_gzip(tmp_path: Path) -> None:
    data = encode_tfrecord({}, records=[_record_of(0x8B1F)[0]], gzip_level=6)
    with pytest.raises(FormatError, match=r"gzip-compressed .* gunzip it first"):
        decode_tfrecord(data, name="x.tfrecord")


@pytest.mark.parametrize("remote", [False, True])
@pytest.mark.parametrize("ranged", [0, None])
def test_a_count_given_past_the_records_is_refused_by_name_read_by_records(
    tmp_path: Path, ranged: int | None, remote: bool
) -> None:
    # Read by records, a row past the file's records fetched its span from the index:
    # IndexError, not the shard named with its count (local and object store: file://
    # is read as objects are).
    for i in range(2):
        (tmp_path / f"s{i}.tfrecord").write_bytes(
            encode_tfrecord({"x": np.arange(10 + i)[:, None]})
        )
    src = FileSource(
        f"file://{tmp_path}/*.tfrecord" if remote else tmp_path,
        format="tfrecord",
        shuffle="samples",
        samples_per_file=[10, 14],
        tfrecord_ranges_above=ranged,
    )
    with pytest.raises(DataError, match=r"s1.tfrecord: holds 11 records; .* says 14"):
        with Loader(src, batch_size=4, seed=0, steps=6) as loader:
            batch_digest(loader)
    src.close()


@pytest.mark.parametrize("level", [0, 1, 6, 9])
def test_a_zlib_file_is_refused_as_zlib(tmp_path: Path, level: int) -> None:
    # TensorFlow writes compression_type="ZLIB" too: it read as a damaged header.
    data = zlib.compress(encode_tfrecord({"x": np.arange(4)[:, None]}), level)
    with pytest.raises(FormatError, match=r"z\.tfrecord: is zlib-compressed .* decompress"):
        decode_tfrecord(data, name="z.tfrecord")
    (tmp_path / "z.tfrecord").write_bytes(data)
    with pytest.raises(FormatError, match=r"z\.tfrecord: is zlib-compressed"):
        FileSource(tmp_path, format="tfrecord")
