"""A :class:`SparseImage` read as a forward walk (``walking``): growing spans, the bytes
walked past let go, the index that of a walk over the whole file's bytes."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from _tar_shards import write
from headrace.formats._file_list import list_files
from headrace.formats._sparse import BLOCK, WALK_CAP, WALK_SKIP, SparseImage
from headrace.formats._tar import tar_index
from headrace.formats._tfrecord import encode_tfrecord, walk_records


def _image(path: Path) -> SparseImage:
    files = list_files([path])
    image = SparseImage(files.sizes[0], files.local_ranges(0), files.name(0))
    image.fill([(0, BLOCK)], gap=0)  # the count's first read
    image.walking = True
    return image


def _held(image: SparseImage) -> int:
    return image.size - sum(b - a for a, b in image.missing(0, image.size))


def test_a_walk_grows_its_reads_and_holds_only_the_last(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    members = []
    for i in range(120):  # 12 MB: three times the cap
        members += [(f"{i:05d}.bin", rng.bytes(100_000)), (f"{i:05d}.cls", str(i).encode())]
    path = write(tmp_path / "w.tar", members)
    data = path.read_bytes()
    image = _image(path)
    got = tar_index(image.at, image.size, image.name)
    want = tar_index(lambda a, n: data[a : a + n], len(data), "w.tar")
    for x, y in zip(_fields(got), _fields(want), strict=True):
        np.testing.assert_array_equal(x, y)
    sizes = [b - a for a, b in image.on_demand]
    assert sizes[0] >= 2 * BLOCK and max(sizes) == WALK_CAP
    assert sizes[:-1] == sorted(sizes[:-1])  # growing (the last: the object's rest)
    assert image.gets == 1 + len(sizes) <= 10
    assert image.nbytes <= len(data)  # fetched once each
    assert _held(image) <= WALK_CAP
    # The pages walked past were given back: a private anonymous mapping reads zeros.
    past = image.on_demand[-1][0] // 4096 * 4096 - 4096
    assert past > len(data) // 2 and not image.buffer[:past].any()


def test_a_walk_past_large_records_reads_a_block_a_record(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    records = [rng.bytes(2 * WALK_SKIP) for _ in range(5)]
    path = tmp_path / "r.tfrecord"
    path.write_bytes(encode_tfrecord({}, records=records))
    image = _image(path)
    starts, lengths = walk_records(image.at, image.size, image.name)
    assert lengths.tolist() == [2 * WALK_SKIP] * 5
    assert starts.tolist() == [12 + k * (2 * WALK_SKIP + 16) for k in range(5)]
    assert [b - a for a, b in image.on_demand] == [BLOCK] * 4  # a GET a record, as before
    assert image.nbytes == 5 * BLOCK


def _fields(index: object) -> list[object]:
    return [getattr(index, f) for f in ("keys", "header", "first", "field", "at", "size")]
