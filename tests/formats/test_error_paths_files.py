"""Error paths of file reading that no other test reached, each on real files written here:
a PNG whose image data zlib refuses (where Pillow is told to accept truncation), an NPZ
member that inflates to less than its zip directory says, a folder path that cannot be
looked at, an MDS ``index.json`` that cannot be opened, and I/O errors met inside the
zip and HDF5 parsers of files read by ranges (a real ``EIO`` from a slowfs mount). Token
shards opened from one listing of a ``file://`` folder meet a Megatron index deleted
between the listing and its read.

Each names the file and what is wrong with it. The two slowfs tests are marked
``integration`` (a FUSE mount; skipped where none can be made).
"""

from __future__ import annotations

import errno
import io
import os
import re
import struct
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path

import h5py
import numpy as np
import pytest

from headrace.emulate import ReadFault, SlowMount
from headrace.errors import ConfigError, FormatError, ObjectNotFoundError, StorageError
from headrace.formats import (
    FileSource,
    MDSSource,
    TokenSource,
    encode_png,
    write_megatron_index,
    write_sample_file,
)
from headrace.formats._object_files import ObjectFiles
from headrace.io import ObjectInfo

PAGE = 4096


# ---------------------------------------------------------------- PNG


def _png_with_bad_block(a: np.ndarray) -> bytes:
    """``a``'s PNG whose deflate data opens with a block of the reserved type 3, its
    IDAT chunk's CRC rewritten: every chunk well formed, the zlib stream not."""
    data = bytearray(encode_png(a))
    at = data.index(b"IDAT") - 4
    (length,) = struct.unpack_from(">I", data, at)
    data[at + 10] |= 0b110  # after the 2-byte zlib header: BFINAL, then BTYPE = 11
    struct.pack_into(">I", data, at + 8 + length, zlib.crc32(data[at + 4 : at + 8 + length]))
    return bytes(data)


def test_a_png_whose_image_data_zlib_refuses_is_named_where_pillow_accepts_truncation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from PIL import ImageFile

    a = np.random.default_rng(0).integers(0, 256, (16, 16, 3), dtype=np.uint8)
    (tmp_path / "a.png").write_bytes(encode_png(a))
    (tmp_path / "b.png").write_bytes(_png_with_bad_block(a))
    # A line many training scripts carry: Pillow would fill the rest with zeros.
    monkeypatch.setattr(ImageFile, "LOAD_TRUNCATED_IMAGES", True)
    src = FileSource(tmp_path, format="png", shuffle="none")  # a.png is sample 0, b.png 1
    with pytest.raises(
        FormatError, match=r"b\.png: corrupt PNG image data \(Error -3 .*invalid block type\)"
    ):
        src.read(0, np.array([1]))
    np.testing.assert_array_equal(src.read(0, np.array([0]))["image"][0], a)


# ---------------------------------------------------------------- NPZ, deflated


def test_a_deflated_npz_member_shorter_than_its_directory_says_is_refused(
    tmp_path: Path,
) -> None:
    buf = io.BytesIO()
    np.savez_compressed(buf, x=np.arange(1000).reshape(10, 100))
    data = bytearray(buf.getvalue())
    at = data.index(b"PK\x01\x02") + 24  # the central directory's uncompressed size
    (size,) = struct.unpack_from("<I", data, at)
    struct.pack_into("<I", data, at, size + 8)  # the stream ends, whole, 8 bytes short
    (tmp_path / "z.npz").write_bytes(bytes(data))
    src = FileSource(tmp_path, format="npz")  # a file a sample: each inflated whole
    with pytest.raises(
        FormatError,
        match=rf"z\.npz: member 'x\.npy': corrupt: directory says {size + 8} bytes "
        rf"uncompressed, found {size}: copy the file again",
    ):
        src.read(0, np.arange(1))


# ---------------------------------------------------------------- a folder not looked at


@pytest.mark.parametrize("code", [errno.ENOTDIR, errno.ELOOP], ids=["through a file", "a loop"])
def test_a_folder_that_cannot_be_looked_at_is_a_storage_error_naming_it(
    tmp_path: Path, code: int
) -> None:
    if code == errno.ENOTDIR:  # a path through a file
        write_sample_file("npz", tmp_path / "a.npz", {"x": np.arange(3)})
        root = tmp_path / "a.npz" / "train"
    else:
        root = tmp_path / "loop"
        os.symlink(root, root)  # a symlink to itself
    why = re.escape(os.strerror(code))
    with pytest.raises(
        StorageError, match=rf"{re.escape(str(root))}: cannot open \({why}\)$"
    ) as info:
        FileSource(root, format="npz")
    assert info.value.errno == code


# ---------------------------------------------------------------- MDS index.json


@pytest.mark.parametrize("code", [errno.EISDIR, errno.ELOOP], ids=["a folder", "a loop"])
def test_an_mds_index_that_cannot_be_opened_is_a_storage_error_naming_it(
    tmp_path: Path, code: int
) -> None:
    root = tmp_path / "ds"
    root.mkdir()
    index = root / "index.json"
    if code == errno.EISDIR:
        index.mkdir()  # a folder in its place
    else:
        os.symlink(index, index)  # a symlink to itself
    why = re.escape(os.strerror(code))
    with pytest.raises(
        StorageError, match=rf"{re.escape(str(index))}: cannot open \({why}\)$"
    ) as info:
        MDSSource(root)
    assert info.value.errno == code


@pytest.mark.parametrize("where", ["ds/index.json", "s3://bucket/ds/index.json/"])
def test_an_mds_index_file_given_for_its_folder_says_to_pass_the_folder(where: str) -> None:
    # It said "ds/index.json/index.json: Not a directory" until 2026-12-06.
    given = where.rstrip("/")
    folder = given.removesuffix("/index.json")
    with pytest.raises(
        ConfigError,
        match=rf"^{re.escape(given)}: MDSSource takes the folder or prefix that holds "
        rf"index\.json \(and the shards\), not the file: pass '{re.escape(folder)}'$",
    ):
        MDSSource(where)


# ---------------------------------------------------------------- EIO inside a parser

# A file read by ranges is a SparseImage that zipfile or h5py reads as a file; a fetch
# that fails in there is re-raised as it was (h5py says only "can't open file"), not
# taken for a file that does not parse, read whole.


def _npz_of_many_members(path: Path, members: int) -> int:
    """An NPZ of ``members`` stored members of 4 rows; the byte its zip directory starts at."""
    with zipfile.ZipFile(path, "w") as zf:
        for k in range(members):
            buf = io.BytesIO()
            np.save(buf, np.full((4, 2), k, np.int32))
            zf.writestr(f"a_name_long_enough_to_fill_the_directory_{k:04d}.npy", buf.getvalue())
    data = path.read_bytes()
    (start,) = struct.unpack_from("<I", data, len(data) - 22 + 16)  # the end record's offset
    return int(start)


@pytest.mark.integration
def test_an_io_error_reading_an_npz_directory_by_ranges_names_its_bytes(
    tmp_path: Path, slow_mount: Callable[..., SlowMount]
) -> None:
    src = tmp_path / "src"
    src.mkdir()
    _npz_of_many_members(src / "0.npz", 200)
    start = _npz_of_many_members(src / "1.npz", 200)
    size = (src / "1.npz").stat().st_size
    # The directory (19 KB) starts before the file's last 4 KiB, which are read first and
    # read well; every page before them fails.
    ends = (size - 4096) // PAGE * PAGE
    assert start < ends
    m = slow_mount(src, fail_reads=[ReadFault(glob="1.npz", end=ends)])
    files = FileSource(
        m.mnt, format="npz", samples_per_file=4, shuffle="samples", npz_ranges_above=0
    )
    with pytest.raises(
        StorageError, match=rf"1\.npz: read of bytes \[{start}, \d+\) failed after 0 bytes: "
    ) as info:
        files.read(0, np.arange(8))
    assert info.value.errno == errno.EIO


@pytest.mark.integration
def test_an_io_error_opening_an_hdf5_file_by_ranges_names_its_bytes(
    tmp_path: Path, slow_mount: Callable[..., SlowMount]
) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for i in range(2):
        # A 32 KiB user block: HDF5 looks for the superblock past the first 16 KiB (read
        # first, and read well); every byte from there fails.
        with h5py.File(src / f"{i}.h5", "w", userblock_size=32768) as f:
            f.create_dataset("x", data=np.arange(32).reshape(8, 4) + 100 * i)
    m = slow_mount(src, fail_reads=[ReadFault(glob="1.h5", start=16384)])
    files = FileSource(
        m.mnt,
        format="hdf5",
        samples_per_file=8,
        datasets=("x",),
        shuffle="samples",
        hdf5_local_ranges_above=0,
    )
    with pytest.raises(
        StorageError, match=r"1\.h5: read of bytes \[16384, \d+\) failed after 0 bytes: "
    ) as info:
        files.read(0, np.arange(16))
    assert info.value.errno == errno.EIO


# ---------------------------------------------------------------- token shards listed


def test_a_megatron_index_deleted_after_its_listing_is_named_as_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    urls = []
    for i in range(2):
        tokens = np.arange(1000, dtype=np.uint16) + i
        tokens.tofile(tmp_path / f"s{i}.bin")
        write_megatron_index(tmp_path / f"s{i}.idx", np.uint16, np.array([tokens.size]))
        urls.append((tmp_path / f"s{i}.bin").as_uri())
    listing = ObjectFiles.listing_upto

    def listed_then_deleted(
        self: ObjectFiles, url: str, limit: int
    ) -> list[tuple[str, ObjectInfo]] | None:
        out = listing(self, url, limit)
        (tmp_path / "s1.idx").unlink()  # the fault: deleted between the listing and its read
        return out

    monkeypatch.setattr(ObjectFiles, "listing_upto", listed_then_deleted)
    idx = (tmp_path / "s1.idx").as_uri()
    with pytest.raises(
        ObjectNotFoundError,
        match=rf"{re.escape(idx)}: listed under {re.escape(tmp_path.as_uri())}/ but gone when "
        r"read \(deleted since\?\); reopen the source once the dataset is complete",
    ):
        TokenSource(urls, context=32)
