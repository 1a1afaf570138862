"""Deflated NPZ members inflated piece by piece: the array, or only the rows a read asks."""

from __future__ import annotations

import io
import struct
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from headrace.errors import DataError, FormatError
from headrace.formats import FileSource, decode_npz
from headrace.pipeline import Loader
from headrace.testing import batch_digest

MiB = 1 << 20
ROWS = 64


def _member(rows: int = ROWS, mib: int = 8) -> np.ndarray:
    """A compressible float32 array of ``mib`` MiB (4-bit values), ``rows`` on axis 0."""
    rng = np.random.default_rng(rows)
    return rng.integers(0, 16, (rows, mib * MiB // rows // 4)).astype(np.float32)


def _savez(**arrays: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return buf.getvalue()


def _peak(fn: object) -> tuple[object, int]:
    tracemalloc.start()
    try:
        out = fn()  # type: ignore[operator]
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_deflated_member_peaks_at_its_size_not_twice() -> None:
    x = _member()
    data = _savez(x=x, y=x[:, :3])
    got, peak = _peak(lambda: decode_npz(data, name="f.npz", keys=["x"]))
    np.testing.assert_array_equal(got["x"], np.load(io.BytesIO(data))["x"])  # type: ignore[index]
    # zlib's one-shot inflate built the member in blocks and joined them: 2.00x.
    assert peak < 1.2 * x.nbytes


@pytest.mark.parametrize("rows", [[5], [3, 4, 5, 40, 63], list(range(ROWS))])
def test_rows_of_a_deflated_member_keep_only_those_rows(rows: list[int]) -> None:
    x = _member()
    data = _savez(x=x, y=np.arange(ROWS * 3).reshape(ROWS, 3))
    want = np.array(rows, dtype=np.int64)
    got, peak = _peak(lambda: decode_npz(data, name="f.npz", rows=want, count=(ROWS, "its count")))
    ref = np.load(io.BytesIO(data))
    for k in ("x", "y"):
        np.testing.assert_array_equal(got[k], ref[k][want])  # type: ignore[index]
    # The rows, and a piece being inflated (1 MiB, up to 2 while zlib joins its blocks).
    assert peak < len(rows) * x[0].nbytes + 3 * MiB


def test_rows_of_a_stored_member_are_a_view_when_they_run() -> None:
    x = np.arange(40).reshape(10, 4)
    buf = io.BytesIO()
    np.savez(buf, x=x)
    data = buf.getvalue()
    run = decode_npz(data, name="s.npz", rows=np.arange(3, 6))["x"]
    assert not run.flags.owndata and np.array_equal(run, x[3:6])
    np.testing.assert_array_equal(decode_npz(data, name="s.npz", rows=np.array([1, 8]))["x"],
                                  x[[1, 8]])  # fmt: skip


def test_rows_of_fortran_order_and_scalar_items_read_whole() -> None:
    x = np.asfortranarray(np.arange(60, dtype=np.int16).reshape(10, 6))
    data = _savez(x=x, v=np.zeros((10, 0)))
    got = decode_npz(data, name="f.npz", rows=np.array([2, 7]))
    np.testing.assert_array_equal(got["x"], x[[2, 7]])
    assert got["v"].shape == (2, 0)


def test_a_leading_axis_other_than_the_count_names_the_file_and_member() -> None:
    data = _savez(x=np.zeros((6, 2)))
    with pytest.raises(
        DataError,
        match=r"f\.npz: 'x' has shape \(6, 2\); expected 8 samples on its leading axis "
        r"\(samples_per_file=8\)",
    ):
        decode_npz(data, name="f.npz", rows=np.array([1]), count=(8, "samples_per_file=8"))


def test_a_member_that_inflates_past_the_directorys_size_is_refused() -> None:
    data = bytearray(_savez(x=np.arange(1000)))
    at = data.index(b"PK\x01\x02") + 24  # the central directory's uncompressed size
    (size,) = struct.unpack_from("<I", data, at)
    struct.pack_into("<I", data, at, size - 100)
    for rows in (None, np.array([0, 1])):
        with pytest.raises(
            FormatError,
            match=rf"f\.npz: member 'x\.npy': corrupt: directory says {size - 100} bytes "
            r"uncompressed, found \d+ or more",
        ):
            decode_npz(bytes(data), name="f.npz", rows=rows)


def test_a_damaged_stream_fails_a_read_of_any_rows(tmp_path: Path) -> None:
    x = np.arange(ROWS * 256, dtype=np.int64).reshape(ROWS, 256)
    data = bytearray(_savez(x=x))
    at = data.index(b"PK\x01\x02") + 16  # the directory's CRC-32
    data[at] ^= 0x01
    for rows in ([0], [ROWS - 1]):  # rows before the damage fail too: the file is whole
        with pytest.raises(FormatError, match=r"f\.npz: member 'x\.npy': corrupt: CRC-32"):
            decode_npz(bytes(data), name="f.npz", rows=np.array(rows))


def test_a_source_of_deflated_files_reads_the_same_samples(tmp_path: Path) -> None:
    root = tmp_path / "z"
    root.mkdir()
    for i in range(6):
        rng = np.random.default_rng(i)
        x = rng.integers(0, 9, (16, 32, 8)).astype(np.uint8)
        with (root / f"{i}.npz").open("wb") as f:
            f.write(_savez(x=x, y=np.arange(16) + 100 * i))
    digests = {}
    for shuffle in ("samples", "files"):
        for mode in ("headrace", "map-style"):  # map-style decodes whole files
            src = FileSource(root, format="npz", samples_per_file=16, shuffle=shuffle, mode=mode)
            with Loader(src, batch_size=5, seed=2, steps=12) as loader:
                digests[shuffle, mode] = batch_digest(loader)
            assert src.stats.peak_held_bytes <= src.in_flight * max(src.files.sizes)
            src.close()
        assert digests[shuffle, "headrace"] == digests[shuffle, "map-style"]


@pytest.mark.parametrize("compress", [False, True])
def test_rows_past_the_leading_axis_name_the_file_and_shape(compress: bool) -> None:
    buf = io.BytesIO()
    (np.savez_compressed if compress else np.savez)(buf, x=np.zeros((6, 2)))
    with pytest.raises(
        DataError,
        match=r"f\.npz: 'x' has shape \(6, 2\); rows 2 to 6 asked, expected rows in \[0, 6\)",
    ):
        decode_npz(buf.getvalue(), name="f.npz", rows=np.array([2, 6]))


def test_rows_of_a_0d_member_are_refused_by_name() -> None:
    with pytest.raises(DataError, match=r"f\.npz: 'c' is a 0-d array \(shape \(\)\)"):
        decode_npz(_savez(c=np.array(3.0)), name="f.npz", rows=np.array([0]))
