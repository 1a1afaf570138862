"""NPY, NPZ and HDF5 files of less common shapes and types: read as NumPy reads them,
or refused by name, saying what was found and what to do."""

from __future__ import annotations

import struct
import zipfile
from pathlib import Path

import h5py
import numpy as np
import pytest

from headrace.errors import DataError, FormatError
from headrace.formats import FileSource
from headrace.formats._hdf5 import decode_hdf5
from headrace.formats._npy import decode_npy, encode_npy
from headrace.formats._npz import decode_npz


def _npy(descr: object, shape: tuple[int, ...], fortran: bool, data: bytes) -> bytes:
    """An NPY file of version 1.0 with the header fields given (another writer's)."""
    text = repr({"descr": descr, "fortran_order": fortran, "shape": shape}).encode() + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text + data


def test_a_subarray_descr_reads_as_trailing_axes(tmp_path: Path) -> None:
    # A descr of a subarray dtype, ('<i4', (2,)), of shape (3,): 3 items of 2 int32, as
    # np.empty((3,), that dtype) makes them (shape (3, 2)). A bare ValueError before
    # ("cannot reshape array of size 6 into shape (3,)"), naming no file.
    want = np.arange(6 * 5, dtype="<i4").reshape(6, 5, 1)
    data = _npy(("<i4", (5, 1)), (6,), False, want.tobytes())
    np.testing.assert_array_equal(decode_npy(data, name="a.npy"), want)
    # By rows too: the rows are the items, 20 bytes each.
    for i in range(2):
        (tmp_path / f"{i}.npy").write_bytes(data)
    src = FileSource(
        tmp_path, format="npy", shuffle="samples", npy_ranges_above=0, samples_per_file="header"
    )
    batch = src.read(0, np.arange(12))
    _, items = src.file_item(batch["index"])
    np.testing.assert_array_equal(batch["data"], want[items])
    src.close()


def test_a_fortran_order_subarray_descr_is_refused_by_name() -> None:
    data = _npy(("<i4", (2,)), (3, 2), True, bytes(48))
    with pytest.raises(FormatError, match=r"a\.npy: .*subarray.*\(2,\)"):
        decode_npy(data, name="a.npy")


@pytest.mark.parametrize("compress", [False, True])
@pytest.mark.parametrize("by_rows", [False, True])
def test_npz_members_of_other_lengths_are_named_as_disagreeing(
    tmp_path: Path, compress: bool, by_rows: bool
) -> None:
    # The count is the first member's; a member of another length said "the file
    # changed since it was counted: open the source again", which changes nothing.
    save = np.savez_compressed if compress else np.savez
    for i in range(2):
        save(tmp_path / f"{i}.npz", x=np.arange(10), y=np.arange(12))
    src = FileSource(
        tmp_path,
        format="npz",
        shuffle="samples",
        samples_per_file="header",
        npz_ranges_above=0 if by_rows else None,
    )
    with pytest.raises(DataError, match=r"npz: 'y' has shape \(12,\); expected 10 .* 'x'") as e:
        src.read(0, np.arange(3))
    assert "changed" not in str(e.value)
    assert "datasets=" in str(e.value)
    src.close()


@pytest.mark.parametrize("chunks", [None, (2,)])
def test_hdf5_opaque_values_of_another_writer_are_not_called_damage(
    tmp_path: Path, chunks: tuple[int, ...] | None
) -> None:
    # HDF5 opaque values tagged by another writer: h5py finds no conversion to the
    # dtype it gives them (|V4). That was "truncated or corrupt data", or for a chunked
    # dataset "the chunk of samples [0, 2) does not pass its filters (none) ... the file
    # is damaged: copy or write it again", of an intact file.
    path = tmp_path / "o.h5"
    with h5py.File(path, "w") as f:
        tid = h5py.h5t.create(h5py.h5t.OPAQUE, 4)
        tid.set_tag(b"vendor/blob")
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        if chunks:
            dcpl.set_chunk(chunks)
        ds = h5py.h5d.create(f.id, b"x", tid, h5py.h5s.create_simple((6,)), dcpl=dcpl)
        ds.write(h5py.h5s.ALL, h5py.h5s.ALL, np.arange(24, dtype="u1").view("V4"), mtype=tid)
    for index in (None, [1, 4]):
        with pytest.raises(FormatError, match=r"o\.h5: dataset 'x'.*opaque.*vendor/blob") as e:
            decode_hdf5(path.read_bytes(), name="o.h5", dataset="x", index=index)
        assert "damaged" not in str(e.value) and "corrupt" not in str(e.value)


def _npz_of(path: Path, members: dict[str, np.ndarray]) -> None:
    with zipfile.ZipFile(path, "w") as zf:
        for member, a in members.items():
            zf.writestr(member, encode_npy(a))


@pytest.mark.parametrize("by_rows", [False, True])
def test_npz_members_named_x_and_x_npy_are_refused_as_one_key(
    tmp_path: Path, by_rows: bool
) -> None:
    # Both are key 'x': the read took 'x.npy' where np.load takes 'x', silently.
    _npz_of(tmp_path / "a.npz", {"x": np.arange(5), "x.npy": np.arange(6), "y": np.arange(5)})
    match = r"a\.npz: members 'x' and 'x\.npy' are both key 'x'"
    with pytest.raises(FormatError, match=match):
        decode_npz((tmp_path / "a.npz").read_bytes(), name="a.npz")
    # Counted from the header (refused as the source opens), and read by rows or whole.
    with pytest.raises(FormatError, match=match):
        FileSource(tmp_path, format="npz", samples_per_file="header")
    src = FileSource(
        tmp_path,
        format="npz",
        shuffle="samples",
        samples_per_file=5,
        npz_ranges_above=0 if by_rows else None,
    )
    with pytest.raises(FormatError, match=match):
        src.read(0, np.arange(2))
    src.close()
    # Picking the other members reads them.
    src = FileSource(tmp_path, format="npz", samples_per_file=5, datasets=("y",))
    np.testing.assert_array_equal(np.sort(src.read(0, np.arange(5))["y"]), np.arange(5))
    src.close()


@pytest.mark.parametrize("path", ["./g/x", "g/./x", "/./g/x"])
def test_hdf5_dataset_paths_through_dot_read_as_h5py_reads_them(tmp_path: Path, path: str) -> None:
    # h5py reads "./g/x"; the link check looked up a link named "." and said "corrupt
    # HDF5 metadata ... the file is damaged" of an intact file.
    with h5py.File(tmp_path / "n.h5", "w") as f:
        f.create_dataset("g/x", data=np.arange(6).reshape(3, 2))
    data = (tmp_path / "n.h5").read_bytes()
    np.testing.assert_array_equal(
        decode_hdf5(data, name="n.h5", dataset=path), np.arange(6).reshape(3, 2)
    )
    with pytest.raises(FormatError, match=r"n\.h5: no dataset '\./g/y'"):
        decode_hdf5(data, name="n.h5", dataset="./g/y")


def test_a_missing_dataset_is_named_in_a_file_of_latin_1_link_names(tmp_path: Path) -> None:
    # h5py gives a link name that is not UTF-8 as bytes: the list of the file's datasets,
    # sorted, raised "TypeError: '<' not supported between instances of 'str' and 'bytes'".
    with h5py.File(tmp_path / "a.h5", "w") as f:
        f.create_dataset(b"caf\xe9", data=np.arange(3))
        f.create_dataset("x", data=np.arange(3))
    data = (tmp_path / "a.h5").read_bytes()
    match = r"a\.h5: no dataset 'nope'; the file holds \['caf\ufffd', 'x'\]"
    with pytest.raises(FormatError, match=match):
        decode_hdf5(data, name="a.h5", dataset="nope")
    with pytest.raises(FormatError, match=match):
        FileSource(tmp_path, format="hdf5", datasets=("nope",), samples_per_file="header")


def test_a_damaged_dataset_header_is_named_when_counted(tmp_path: Path) -> None:
    # The dataspace of 'b' says 356 rows of at most 100: h5py raised KeyError ("Unable
    # to synchronously open object (dataspace dim 0 size of 356 is greater than maxdim
    # size of 100)") out of the count (samples_per_file="header"); decoding named it.
    with h5py.File(tmp_path / "a.h5", "w", libver="earliest") as f:
        f.create_dataset("a", data=np.arange(100))
        f.create_dataset("b", data=np.arange(100))
    data = bytearray((tmp_path / "a.h5").read_bytes())
    dims = struct.pack("<QQ", 100, 100)  # a version 1 dataspace: sizes, then maxima
    at = data.rindex(dims)
    data[at + 1] ^= 1
    (tmp_path / "a.h5").write_bytes(bytes(data))
    match = r"a\.h5: corrupt HDF5 metadata: .*dataspace.*copy or write it again"
    with pytest.raises(FormatError, match=match):
        decode_hdf5(bytes(data), name="a.h5", dataset="b")
    with pytest.raises(FormatError, match=match):
        FileSource(tmp_path, format="hdf5", datasets=("a", "b"), samples_per_file="header")


def test_hdf5_metadata_numpy_cannot_take_is_named(tmp_path: Path) -> None:
    # A 9-byte integer type (HDF5 allows it; NumPy has none): h5py's dtype raised
    # "TypeError: data type '<i9' not understood" from decoding and counting alike.
    path = tmp_path / "a.h5"
    with h5py.File(path, "w") as f:
        wide = h5py.h5t.STD_I64LE.copy()
        wide.set_size(9)
        wide.set_precision(72)
        h5py.h5d.create(f.id, b"w", wide, h5py.h5s.create_simple((4,)))
    match = r"a\.h5: dataset 'w'.*'<i9' not understood.*NumPy has no equivalent"
    with pytest.raises(FormatError, match=match):
        decode_hdf5(path.read_bytes(), name="a.h5", dataset="w")
    with pytest.raises(FormatError, match=match):
        FileSource(tmp_path, format="hdf5", datasets=("w",), samples_per_file="header")


def test_an_hdf5_link_name_that_is_not_its_charset_is_named_as_damage(tmp_path: Path) -> None:
    # Link 'x' (UTF-8) damaged to b'\x87': listing the file's datasets raised h5py's
    # UnicodeDecodeError from decoding and counting alike.
    with h5py.File(tmp_path / "a.h5", "w", libver="earliest") as f:
        f.create_dataset("x", data=np.arange(10))
        f.create_dataset("y", data=np.arange(10))
    data = bytearray((tmp_path / "a.h5").read_bytes())
    data[data.index(b"\x00x\x00\x00\x00\x00\x00\x00\x00y\x00") + 1] = 0x87  # the heap's names
    (tmp_path / "a.h5").write_bytes(bytes(data))
    match = r"a\.h5: corrupt HDF5 metadata: .*utf-8.*copy or write it again"
    with pytest.raises(FormatError, match=match):
        decode_hdf5(bytes(data), name="a.h5", dataset="x")
    with pytest.raises(FormatError, match=match):
        FileSource(tmp_path, format="hdf5", datasets=("x",), samples_per_file="header")
