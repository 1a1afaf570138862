"""Sparse HDF5 images: held ranges, reads on demand, and layouts learned from real files."""

from __future__ import annotations

import io
from pathlib import Path

import h5py
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headrace.errors import FormatError, StorageError
from headrace.formats._hdf5 import decode_hdf5
from headrace.formats._hdf5_ranges import learn_layout
from headrace.formats._sparse import BLOCK, SparseImage


class Counted:
    """A fetch over real bytes that counts its batches and spans."""

    def __init__(self, data: bytes) -> None:
        self.data = np.frombuffer(data, np.uint8)
        self.batches: list[list[tuple[int, int]]] = []

    def __call__(self, spans: list[tuple[int, int]], buf: np.ndarray) -> None:
        self.batches.append(list(spans))
        for a, b in spans:
            buf[a:b] = self.data[a:b]


def image(data: bytes) -> tuple[SparseImage, Counted]:
    fetch = Counted(data)
    return SparseImage(len(data), fetch, "mem://f.h5"), fetch


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 300), st.integers(0, 60)), max_size=12))
def test_held_ranges_are_the_union_of_those_filled(spans: list[tuple[int, int]]) -> None:
    img, fetch = image(bytes(400))
    held = np.zeros(400, bool)
    for a, n in spans:
        img.fill([(a, a + n)], gap=0)
        held[a : min(a + n, 400)] = True
        # Nothing held is fetched twice.
        got = np.zeros(400, int)
        for batch in fetch.batches:
            for s, e in batch:
                got[s:e] += 1
        assert got.max() <= 1
    for a in range(0, 400, 7):
        for b in (a, a + 1, a + 33, 400):
            gaps = img.missing(a, b)
            want = np.zeros(400, bool)
            for s, e in gaps:
                want[s:e] = True
            assert (want[a:b] == ~held[a:b]).all()


def test_a_read_of_bytes_not_held_fetches_a_block_and_records_it() -> None:
    data = bytes(range(256)) * 64
    img, fetch = image(data)
    img.seek(100)
    assert img.read(10) == data[100:110]
    assert img.on_demand == [(100, 100 + BLOCK)]
    img.seek(110)
    assert img.read(50) == data[110:160]  # held: no fetch
    assert len(fetch.batches) == 1
    img.seek(-5, io.SEEK_END)
    assert img.read(100) == data[-5:] and img.read(1) == b""
    with pytest.raises(OSError, match="negative seek"):
        img.seek(-1)


def _files(tmp_path: Path) -> dict[str, bytes]:
    rng = np.random.default_rng(0)
    x = rng.integers(0, 99, (30, 128, 128)).astype(np.float32)
    y = rng.integers(0, 9, (30, 3)).astype(np.int16)
    kinds = {
        "gzip": {
            "chunks": (2, 128, 128),
            "compression": "gzip",
            "shuffle": True,
            "fletcher32": True,
        },
        "lzf-split": {"chunks": (3, 64, 128), "compression": "lzf"},
        "contiguous": {},
    }
    # HDF5 1.10+ chunk indexes: a fixed array (libver="latest"), an extensible array
    # (one unlimited axis), a version-2 B-tree (two).
    kinds["latest"] = {"chunks": (2, 64, 128), "compression": "gzip"}
    kinds["unlimited"] = {"chunks": (2, 128, 128), "maxshape": (None, 128, 128)}
    kinds["unlimited-2"] = {"chunks": (2, 128, 128), "maxshape": (None, None, 128)}
    out = {}
    for kind, kw in kinds.items():
        buf = io.BytesIO()
        libver = "earliest" if kind in ("gzip", "lzf-split", "contiguous") else "latest"
        with h5py.File(buf, "w", libver=libver) as f:
            f.create_dataset("g/x", data=x, **kw)
            f.create_dataset("y", data=y)
            f.create_dataset("s", data=np.float64(3.5))
        out[kind] = buf.getvalue()
    return out


@pytest.mark.parametrize(
    "kind", ["gzip", "lzf-split", "contiguous", "latest", "unlimited", "unlimited-2"]
)
def test_samples_read_by_ranges_equal_the_whole_file_and_fetch_less(
    tmp_path: Path, kind: str
) -> None:
    data = _files(tmp_path)[kind]
    first, _ = image(data)
    layout = learn_layout(first, ["g/x", "y"])
    assert layout.data["g/x"] is not None and layout.data["y"] is not None
    for rows in ([0], [5, 6, 29], [3, 17]):
        idx = np.array(rows)
        img, fetch = image(data)
        img.layout = layout
        img.want(idx)
        for ds in ("g/x", "y"):
            got = decode_hdf5(img, name="f.h5", dataset=ds, index=idx)
            want = decode_hdf5(data, name="f.h5", dataset=ds, index=idx)
            np.testing.assert_array_equal(got, want)
        # Everything in one batch: the decode read nothing it had not fetched.
        assert len(fetch.batches) == 1 and img.on_demand == []
        assert img.nbytes < len(data) / 2


def test_a_dataset_it_cannot_place_is_read_on_demand_and_errors_name_it(
    tmp_path: Path,
) -> None:
    data = _files(tmp_path)["gzip"]
    img, _ = image(data)
    layout = learn_layout(img, ["g/x", "missing"])
    assert layout.data["missing"] is None
    with pytest.raises(FormatError, match=r"f\.h5: no dataset 'missing'; the file holds"):
        decode_hdf5(img, name="f.h5", dataset="missing", index=np.array([1]))
    # A scalar (no rows): its whole block.
    img, _ = image(data)
    img.layout = learn_layout(img, ["s"])
    assert float(decode_hdf5(img, name="f.h5", dataset="s")) == 3.5


def test_not_hdf5_is_refused_by_name() -> None:
    img, _ = image(b"PK\x03\x04" + bytes(20000))
    layout = learn_layout(img, ["x"])
    assert layout.data == {}
    with pytest.raises(FormatError, match=r"f\.h5: not an HDF5 file: no signature"):
        decode_hdf5(img, name="f.h5", dataset="x", index=np.array([0]))


def test_an_image_larger_than_memory_costs_what_it_holds() -> None:
    # 64 GiB mapped (more than RAM + swap here; refused without MAP_NORESERVE).
    size = 64 << 30
    img = SparseImage(size, lambda spans, buf: buf.__setitem__(slice(size - 8, size), 7), "big")
    img.fill([(size - 8, size)], gap=0)
    img.seek(size - 8)
    assert img.read(8) == bytes([7]) * 8
    assert img.nbytes == 8 and img.missing(0, size) == [(0, size - 8)]


def test_a_fetch_failing_inside_h5py_is_raised_as_itself(tmp_path: Path) -> None:
    # HDF5 turns an error in a file object's read into "can't open file" or "read
    # failed": the fetch's own error (naming the URL and range) is raised instead.
    buf = io.BytesIO()
    with h5py.File(buf, "w") as f:  # 200 chunks: index nodes past the first block
        x = np.random.default_rng(1).integers(0, 99, (200, 64, 64)).astype(np.float32)
        f.create_dataset("g/x", data=x, chunks=(1, 64, 64), compression="gzip")
    data = buf.getvalue()
    calls = []

    def flaky(spans: list[tuple[int, int]], buf: np.ndarray) -> None:
        calls.append(spans)
        if len(calls) > 1:
            a, b = spans[0]
            raise StorageError(f"s3://b/f.h5, bytes [{a}, {b}): HTTP 503 (gave up)")
        Counted(data)(spans, buf)

    img = SparseImage(len(data), flaky, "s3://b/f.h5")
    with pytest.raises(StorageError, match=r"s3://b/f\.h5, bytes \[\d+, \d+\): HTTP 503"):
        learn_layout(img, ["g/x"])
    # Decoding an image whose chunks could not be fetched: the same.
    good, _ = image(data)
    layout = learn_layout(good, ["g/x"])
    img = SparseImage(len(data), flaky, "s3://b/f.h5")
    calls.clear()
    img.fill(layout.metadata)  # the first call succeeds; every read of a chunk fails
    with pytest.raises(StorageError, match=r"HTTP 503"):
        decode_hdf5(img, name="s3://b/f.h5", dataset="g/x", index=np.array([7]))


def test_learning_a_chunk_btree_fetches_each_level_at_once() -> None:
    # 660 chunks: a root and 11+ leaves, scattered among the chunks. Read one node at
    # a time (as HDF5 asks), that was a round trip per node.
    buf = io.BytesIO()
    with h5py.File(buf, "w") as f:
        x = np.random.default_rng(2).integers(0, 99, (660, 16, 16)).astype(np.float32)
        f.create_dataset("x", data=x, chunks=(1, 16, 16), compression="gzip")
    data = buf.getvalue()
    img, fetch = image(data)
    layout = learn_layout(img, ["x"])
    leaves = [s for s in layout.metadata if s[0] >= 16384]
    assert len(leaves) >= 10  # the leaves HDF5 read
    assert len(fetch.batches) <= 3, fetch.batches  # first block, leaves (, a stray)
    again, fetch = image(data)
    again.layout = layout
    again.want(np.array([0, 333, 659]))
    got = decode_hdf5(again, name="f.h5", dataset="x", index=np.array([659, 0, 333]))
    np.testing.assert_array_equal(got, x[[659, 0, 333]])
    assert len(fetch.batches) == 1 and again.on_demand == []
