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
        r"\(samples_per_file=8\); where files hold different numbers of samples, give "
        r"samples_per_file='header'",
    ):
        decode_npz(data, name="f.npz", rows=np.array([1]), count=(8, "samples_per_file=8"))


def test_a_member_that_inflates_past_the_directorys_size_is_refused() -> None:
    data = bytearray(_savez(x=np.arange(1000)))
    at = data.index(b"PK\x01\x02") + 24  # the central directory's uncompressed size
    (size,) = struct.unpack_from("<I", data, at)
    struct.pack_into("<I", data, at, size - 100)
    with pytest.raises(
        FormatError,
        match=rf"f\.npz: member 'x\.npy': corrupt: directory says {size - 100} bytes "
        r"uncompressed, found \d+ or more",
    ):
        decode_npz(bytes(data), name="f.npz")
    # A read of rows checks the header against that size first, before it allocates.
    with pytest.raises(
        FormatError,
        match=r"f\.npz: member 'x\.npy': truncated: header says 8000 data bytes .* found 7900",
    ):
        decode_npz(bytes(data), name="f.npz", rows=np.array([0, 1]))


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


def _forge_deflated_size(data: bytes, size: int) -> bytes:
    """The first member's compressed size, in its local header and the directory."""
    out = bytearray(data)
    struct.pack_into("<I", out, out.index(b"PK\x03\x04") + 18, size)
    struct.pack_into("<I", out, out.index(b"PK\x01\x02") + 20, size)
    return bytes(out)


@pytest.mark.parametrize("rows", [None, [3, 5]], ids=["whole", "rows"])
def test_a_deflated_member_of_0_stored_bytes_is_refused_alike_whole_or_by_rows(
    rows: list[int] | None,
) -> None:
    # Whole, it failed as an unended deflate stream; by rows, as "truncated: 0 bytes,
    # shorter than an NPY header": neither said the directory's sizes disagree.
    data = _forge_deflated_size(_savez(x=np.arange(640, dtype=np.int32).reshape(64, 10)), 0)
    with pytest.raises(
        FormatError,
        match=r"f\.npz: member 'x\.npy': corrupt: directory says 0 deflated bytes for "
        r"\d+ bytes uncompressed \(a deflate stream takes at least 2\)",
    ):
        decode_npz(data, name="f.npz", rows=None if rows is None else np.array(rows))


@pytest.mark.parametrize("rows", [None, [1, 4]], ids=["whole", "rows"])
def test_members_of_0_bytes_and_of_objects_when_deflated(rows: list[int] | None) -> None:
    at = None if rows is None else np.array(rows)
    got = decode_npz(_savez(x=np.zeros((6, 0), np.float32), y=np.arange(6)), name="f.npz", rows=at)
    assert got["x"].shape == (6 if rows is None else 2, 0)
    assert got["y"].tolist() == (list(range(6)) if rows is None else rows)
    objects = _savez(o=np.array([{"a": 1}, None, 3, 4, 5, 6], dtype=object))
    with pytest.raises(FormatError, match=r"f\.npz: member 'o\.npy': NPY holds Python objects"):
        decode_npz(objects, name="f.npz", rows=at)


def test_replace_stands_in_for_a_damaged_deflated_member_in_any_read_order(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "z"
    root.mkdir()
    for i in range(6):
        x = np.arange(16 * 50, dtype=np.int32).reshape(16, 50) + 1000 * i
        (root / f"{i}.npz").write_bytes(_savez(x=x, y=np.arange(16) + 16 * i))
    data = bytearray((root / "2.npz").read_bytes())
    at = data.index(b"PK\x03\x04")
    name_len, extra_len = struct.unpack_from("<HH", data, at + 26)
    body = at + 30 + name_len + extra_len
    data[body + 40 : body + 80] = bytes(b ^ 0x5A for b in data[body + 40 : body + 80])
    (root / "2.npz").write_bytes(bytes(data))
    for shuffle in ("samples", "files"):  # rows of a member, or whole members
        for mode in ("headrace", "map-style"):
            src = FileSource(root, format="npz", samples_per_file=16, shuffle=shuffle, mode=mode)
            with pytest.raises(FormatError, match=r"2\.npz: member 'x\.npy': corrupt deflate"):
                list(Loader(src, batch_size=8, steps=12))
            src = FileSource(
                root,
                format="npz",
                samples_per_file=16,
                shuffle=shuffle,
                mode=mode,
                on_corrupt="replace",
                max_corrupt=0.5,
            )
            caplog.clear()
            with Loader(src, batch_size=8, steps=12) as loader:
                batches = list(loader)
            assert "2.npz: member 'x.npy': corrupt deflate stream" in caplog.text
            for b in batches:  # each sample whole and its own, none of file 2
                assert (b["x"][:, 0] == b["y"] % 16 * 50 + 1000 * (b["y"] // 16)).all()
            assert 2 not in {int(y) // 16 for b in batches for y in b["y"]}
