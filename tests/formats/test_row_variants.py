"""Padded row files as other tools write them: big-endian and version-3 NPY, raw files
whose sidecar disagrees with their size, masks of another shape."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from headrace.errors import DataError, FormatError
from headrace.formats import PaddedRows, write_row_file

_TOK = np.random.default_rng(0).integers(1, 1000, (16, 9)).astype(np.uint16)
_TOK[:, 7:] = 0


def _x(tokens: Path, mask: Path | None = None) -> np.ndarray:
    src = PaddedRows(tokens, mask, context=8, shuffle=False)
    x: np.ndarray = src.read(0, np.arange(16))["x"]
    return x


def test_an_upper_case_npy_name_is_an_npy_file(tmp_path: Path) -> None:
    # ROWS.NPY was opened as raw rows, then refused as "an NPY file ... Rename it to end
    # in .npy" (fails before: FormatError); written by that name, it was raw bytes.
    np.save(tmp_path / "t.npy", _TOK)
    (tmp_path / "t.npy").rename(tmp_path / "T.NPY")
    assert np.array_equal(_x(tmp_path / "T.NPY"), _TOK[:, :8].astype(np.int32))
    assert write_row_file(tmp_path / "W.NPY", _TOK).format == "npy"
    assert np.array_equal(np.load(tmp_path / "W.NPY"), _TOK)


@pytest.mark.parametrize("version", [(1, 0), (3, 0)])
def test_big_endian_npy_rows_read_as_their_values(version: tuple[int, int], tmp_path: Path) -> None:
    path = tmp_path / "be.npy"
    with open(path, "wb") as f:
        np.lib.format.write_array(f, _TOK.astype(">u2"), version=version)
    assert np.array_equal(_x(path), _TOK[:, :8].astype(np.int32))


def test_fortran_order_rows_are_refused(tmp_path: Path) -> None:
    np.save(tmp_path / "f.npy", np.asfortranarray(_TOK))
    with pytest.raises(FormatError, match=r"f\.npy: the array is stored in Fortran"):
        _x(tmp_path / "f.npy")


@pytest.mark.parametrize(
    "side", [{"dtype": "uint16", "width": 10}, {"dtype": "uint32", "width": 7}]
)
def test_sidecar_that_disagrees_with_the_file_size(side: dict[str, object], tmp_path: Path) -> None:
    path = tmp_path / "t.bin"
    _TOK.tofile(path)  # 288 bytes: rows of 20 or 28 bytes do not divide it
    (tmp_path / "t.bin.json").write_text(json.dumps(side))
    with pytest.raises(DataError, match=r"t\.bin: file size 288 is not a multiple of the row size"):
        _x(path)


def test_a_sidecar_row_count_catches_what_the_size_cannot(tmp_path: Path) -> None:
    path = tmp_path / "t.bin"
    write_row_file(path, _TOK)  # 16 x 9 uint16: the sidecar records the row count
    assert json.loads((tmp_path / "t.bin.json").read_text())["rows"] == 16
    assert np.array_equal(_x(path), _TOK[:, :8].astype(np.int32))
    # uint32 rows of 9 also divide the 288 bytes (8 rows): only the count tells.
    (tmp_path / "t.bin.json").write_text(json.dumps({"dtype": "uint32", "width": 9, "rows": 16}))
    with pytest.raises(DataError, match=r"t\.bin\.json says 16 rows, but 288 bytes hold 8 rows"):
        _x(path)
    (tmp_path / "t.bin.json").write_text(json.dumps({"dtype": "uint16", "width": 9, "rows": -1}))
    with pytest.raises(FormatError, match=r"t\.bin\.json: rows must be a non-negative integer"):
        _x(path)


@pytest.mark.parametrize("mask", [np.ones((15, 9), np.uint8), np.ones((16, 8), np.uint8)])
def test_mask_of_another_shape_is_refused(mask: np.ndarray, tmp_path: Path) -> None:
    np.save(tmp_path / "t.npy", _TOK)
    np.save(tmp_path / "m.npy", mask)
    with pytest.raises(DataError, match=r"m\.npy: mask shape \(\d+, \d+\) disagrees with token"):
        _x(tmp_path / "t.npy", tmp_path / "m.npy")


@pytest.mark.parametrize("how", ["open_memmap", "save_to_handle"])
def test_an_npy_file_under_another_name_is_not_read_as_raw_rows(how: str, tmp_path: Path) -> None:
    # open_memmap and np.save to an open file write NPY whatever the name. Rows of
    # 64 uint16 tokens are 128 bytes, the header's size: read raw, the header became
    # a first row of garbage tokens and every row number moved by one, silently.
    rows = np.random.default_rng(1).integers(1, 1000, (6, 64)).astype(np.uint16)
    path = tmp_path / "tok.bin"
    if how == "open_memmap":
        mm = np.lib.format.open_memmap(path, mode="w+", dtype=np.uint16, shape=rows.shape)
        mm[:] = rows
        mm.flush()
        del mm
    else:
        with open(path, "wb") as f:
            np.save(f, rows)
    (tmp_path / "tok.bin.json").write_text(json.dumps({"dtype": "uint16", "width": 64}))
    npy = r"tok\.bin: an NPY file \(shape \(6, 64\), uint16, .* end in \.npy"
    with pytest.raises(FormatError, match=npy):
        PaddedRows(path, context=63)
    # Raw rows whose first bytes merely look like the magic are still raw rows.
    magic = np.frombuffer(b"\x93NUMPY\x01\x00", np.uint16)
    raw = rows.copy()
    raw[0, :4] = magic
    write_row_file(tmp_path / "raw.bin", raw)
    assert np.array_equal(
        PaddedRows(tmp_path / "raw.bin", context=63, shuffle=False).read(0, np.arange(6))["x"],
        raw[:, :63],
    )


@pytest.mark.parametrize("name", ["be.npy", "be.bin"])
def test_big_endian_pair_rows_come_out_in_native_byte_order(name: str, tmp_path: Path) -> None:
    # Read straight into the stored dtype, they came out as '>u2': torch.from_numpy
    # refuses that ("byte order different from the native"), and a mixture with a
    # native file of the same rows was refused as differing in dtype.
    from headrace.formats import PairRows
    from headrace.pipeline import Loader, Mixture
    from headrace.testing import batch_digest

    write_row_file(tmp_path / name, _TOK.astype(">u2"))
    write_row_file(tmp_path / "mask.npy", (_TOK != 0).astype(">i4"))
    write_row_file(tmp_path / "le.npy", _TOK)
    big = PairRows({"a": (tmp_path / name, tmp_path / "mask.npy")}, shuffle=False)
    got = big.read(0, np.arange(16))
    assert got["a_x"].dtype == np.dtype(np.uint16) and got["a_x"].dtype.isnative
    assert np.array_equal(got["a_x"], _TOK)
    assert np.array_equal(got["a_mask"], _TOK != 0)
    little = PairRows({"a": (tmp_path / "le.npy", tmp_path / "mask.npy")}, shuffle=False)
    assert batch_digest([got]) == batch_digest([little.read(0, np.arange(16))])
    mix = Mixture({"big": big, "little": little}, [0.5, 0.5], batch_size=4)
    with Loader(mix, batch_size=4, seed=1, steps=3) as ld:
        assert all(b["a_x"].dtype.isnative for b in ld)
