"""Tar shards' indexes at scale: a few bytes a member held, one buffer pickled to a worker."""

from __future__ import annotations

import io
import pickle
import tarfile
from pathlib import Path

import numpy as np

from _tar_shards import write
from headrace.formats import FileSource
from headrace.formats._tar import TarIndex, tar_index
from headrace.formats._tar_ranges import HeldIndexes, TarIndexes


def _shard(samples: int, fields: tuple[str, ...] = ("bin", "cls")) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for i in range(samples):
            for field in fields:
                info = tarfile.TarInfo(f"n{1440764 + i % 7:08d}_{(i * 7919) % 13000 + 1}.{field}")
                data = str(i).encode()
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _index(data: bytes, size: int | None = None) -> TarIndex:
    view = memoryview(data)
    return tar_index(lambda a, n: view[a : a + n], len(data) if size is None else size, "s.tar")


def _listed(index: TarIndex) -> list[tuple[str, list[tuple[str, tuple[int, int]]], int]]:
    return [
        (index.key(i), sorted(index.fields(i).items()), int(index.header[i]))
        for i in range(len(index))
    ]


def test_an_index_holds_about_20_bytes_a_member() -> None:
    # Keys of 13 to 15 bytes, two members a sample: int64 offsets, sizes and member
    # numbers and int32 fields held 35.5 bytes a member; 1,000 shards of 1,000: 35.5 MB.
    index = _index(_shard(1_000))
    assert index.nbytes / 2_000 < 21
    assert [index.at.dtype, index.first.dtype, index.field.dtype] == ["u4", "u4", "u1"]
    spans = index.spans([0, 999], None)
    assert len(spans) == 4 and all(isinstance(a, int) for s in spans for a in s)


def test_wide_shards_and_many_fields_keep_their_values() -> None:
    data = _shard(3)
    small, big = _index(data), _index(data, size=5 << 30)  # a shard over 4 GiB (its end
    # marker reached before the bytes end): offsets as int64, the same values
    assert big.at.dtype == np.int64 and big.header.dtype == np.int64
    assert _listed(big) == _listed(small)
    many = _index(_shard(2, tuple(f"f{k:03d}" for k in range(300))))
    assert many.field.dtype == np.int32 and len(many.names) == 300
    assert sorted(many.fields(1)) == [f"f{k:03d}" for k in range(300)]


def test_held_indexes_pickle_as_one_buffer() -> None:
    indexes = TarIndexes()
    for f in range(300):
        indexes.keep(f, _index(_shard(1 + f % 5)))
    held = indexes.held()
    blob = pickle.dumps(held)
    arrays = sum(i.nbytes for _, i in held)
    # An index pickled as itself cost more than its arrays (six arrays' headers, the
    # dataclass; 238 measured); in one buffer its dtypes, offsets, counts, names: 157.
    assert len(blob) - arrays < 300 * 190
    copy = pickle.loads(blob)
    assert isinstance(copy, HeldIndexes) and [f for f, _ in copy] == list(range(300))
    for (_, a), (_, b) in zip(held, copy, strict=True):
        assert _listed(a) == _listed(b) and a.names == b.names
        for x, y in zip(
            (a.keys, a.header, a.first, a.field, a.at, a.size),
            (b.keys, b.header, b.first, b.field, b.at, b.size),
            strict=True,
        ):
            assert x.dtype == y.dtype and np.array_equal(x, y)
    assert pickle.loads(pickle.dumps(HeldIndexes())) == []


def test_a_worker_copy_reads_with_the_indexes_it_was_sent(tmp_path: Path) -> None:
    for s in range(3):
        write(tmp_path / f"{s}.tar", [(f"k{i}.cls", str(10 * s + i).encode()) for i in range(4)])
    src = FileSource(tmp_path, format="tar", shuffle="samples", decode_threads=0)
    want = src.read(1, np.arange(12))["cls"].tolist()
    copy = pickle.loads(pickle.dumps(src))
    assert copy.decoder.tar_indexes is not None
    assert sorted(f for f, _ in copy.decoder.tar_indexes.held()) == [0, 1, 2]  # not walked again
    assert copy.read(1, np.arange(12))["cls"].tolist() == want
    assert sorted(want) == [10 * s + i for s in range(3) for i in range(4)]
    src.close()
    copy.close()
