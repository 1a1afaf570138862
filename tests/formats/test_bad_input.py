"""Bad input met at construction, each refused with a message that names what is wrong.

Found by probing the public API with the mistakes users make; before, each of these
was a bare Python error, a late failure at the first read, or silently wrong.
"""

from __future__ import annotations

import io
from pathlib import Path

import h5py
import numpy as np
import pytest

from headrace.collate import pad_batch
from headrace.errors import ConfigError, DataError, FormatError, ObjectNotFoundError, StorageError
from headrace.formats import (
    FileSource,
    PaddedRows,
    PairRows,
    Table,
    TokenSource,
    write_row_file,
)
from headrace.formats._hdf5 import decode_hdf5
from headrace.io import RangeReader


@pytest.fixture
def tokens(tmp_path: Path) -> Path:
    np.arange(5000, dtype=np.uint16).tofile(tmp_path / "t.bin")
    return tmp_path / "t.bin"


def test_token_paths(tokens: Path, tmp_path: Path) -> None:
    # A folder stands for its .bin files, a pattern for its matches (test_token_paths).
    assert TokenSource(tmp_path, context=8, dtype="uint16").samples_per_epoch == 624
    with pytest.raises(ObjectNotFoundError, match=r"\*\.tok: no token files match"):
        TokenSource(tmp_path / "*.tok", context=8, dtype="uint16")
    with pytest.raises(ObjectNotFoundError, match="ftp:// is not a URL scheme headrace reads"):
        TokenSource("ftp://host/x.bin", context=8, dtype="uint16")
    # A directory or table of a scheme no store reads said "S3:/bucket/train: no such
    # directory" (the path's // collapsed), with no word of the scheme.
    for where in ("S3://bucket/train", "ftp://host/train"):
        scheme = where.partition(":")[0]
        with pytest.raises(
            ObjectNotFoundError, match=rf"^{where}: no such directory .* {scheme}:// is not a URL"
        ):
            FileSource(where, format="npy")
        with pytest.raises(ObjectNotFoundError, match=rf"{scheme}:// is not a URL scheme"):
            Table.open(f"{where}/x.parquet")
    # A path given as bytes is a path, not a list of byte values.
    assert TokenSource(bytes(tokens), context=8, dtype="uint16").samples_per_epoch == 624
    with pytest.raises(ConfigError, match=r"window_bytes=0: window of 0 tokens"):
        TokenSource(tokens, context=8, dtype="uint16", window_bytes=0)  # was a ValueError
    # A window too small for one sample of a long context names the least that serves.
    with pytest.raises(ConfigError, match=r"needs 9\)\. Give window_bytes >= 18 \(256 MiB"):
        TokenSource(tokens, context=8, dtype="uint16", window_bytes=17)
    with pytest.raises(ConfigError, match="context must be a positive integer"):
        TokenSource(tokens, context=True, dtype="uint16")
    with pytest.raises(
        ConfigError, match=r"shuffle must be True or False \('none'\) \(got 'False'\)"
    ):
        TokenSource(tokens, context=8, dtype="uint16", shuffle="False")  # type: ignore[arg-type]
    # "none", as file sources name it, is False: one fingerprint (it was refused).
    flat = TokenSource(tokens, context=8, dtype="uint16", shuffle="none")
    assert (
        flat.fingerprint()
        == TokenSource(tokens, context=8, dtype="uint16", shuffle=False).fingerprint()
    )


@pytest.mark.parametrize(
    ("sidecar", "message"),
    [('{"nodtype": 1}', r"has no 'dtype' key \(keys: \['nodtype'\]\)"), ("[1, 2]", "JSON list")],
)
def test_token_sidecars(tokens: Path, sidecar: str, message: str) -> None:
    Path(f"{tokens}.json").write_text(sidecar)
    with pytest.raises(FormatError, match=message):
        TokenSource(tokens, context=8)


def test_row_and_pair_arguments(tmp_path: Path) -> None:
    write_row_file(tmp_path / "r.npy", np.ones((8, 9), dtype=np.uint16))
    with pytest.raises(ConfigError, match="Unknown read strategy 'bogus'"):
        PaddedRows(tmp_path / "r.npy", context=8, reader="bogus")  # type: ignore[arg-type]
    for spec in [(tmp_path / "r.npy", None, 3), None, (tmp_path / "r.npy", 5)]:
        with pytest.raises(ConfigError, match=r"member 'a': expected a token file or a \(tokens"):
            PairRows({"a": spec})  # type: ignore[dict-item]
    with pytest.raises(StorageError, match="is a directory, not a file"):
        RangeReader("mmap").read(str(tmp_path), [(0, 10)])  # was OSError EINVAL, no path


def test_names_where_a_list_is_expected(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"columns must be a list of names, e.g. columns=\['ids'\]"
    ):
        Table.open(tmp_path / "t.parquet", columns="ids")  # type: ignore[arg-type]
    with pytest.raises(
        ConfigError, match=r"datasets must be a list of names, e.g. datasets=\('x',\)"
    ):
        FileSource(tmp_path, format="hdf5", datasets="x")


def test_table_and_hdf5_contents(tmp_path: Path) -> None:
    (tmp_path / "g.parquet").write_bytes(np.random.default_rng(0).bytes(5000))
    with pytest.raises(FormatError, match=r"g\.parquet: not a Parquet file: it does not start"):
        Table.open(tmp_path / "g.parquet")  # was "corrupt Arrow IPC file"
    buf = io.BytesIO()
    with h5py.File(buf, "w") as f:
        f.create_group("img").create_dataset("x", data=np.zeros(3))
    with pytest.raises(FormatError, match=r"'img' is a group, not a dataset; .* \['img/x'\]"):
        decode_hdf5(memoryview(buf.getvalue()), name="f.h5", dataset="img")


@pytest.mark.parametrize("rows", [[[1, None], [3]], [[2**70], [1]], [["a"], ["b"]]])
def test_pad_batch_refuses_what_is_not_numbers(rows: list[list[object]]) -> None:
    with pytest.raises(DataError, match="not numbers NumPy can hold"):
        pad_batch(rows)  # type: ignore[arg-type]


def test_an_hdf5_superblock_of_a_newer_version_says_so_not_truncated(tmp_path: Path) -> None:
    # HDF5 says "bad superblock version number" for a file from a newer HDF5 (or a
    # damaged one); it was reported as "truncated or corrupt HDF5".
    buf = io.BytesIO()
    with h5py.File(buf, "w", libver="latest") as f:
        f["x"] = np.ones((4, 2))
    data = bytearray(buf.getvalue())
    assert data[8] <= 3  # the superblock's version: 3 is the newest HDF5 writes today
    data[8] = 9
    newer = r"v\.h5: a structure of a version this HDF5 does not know .*upgrade h5py"
    with pytest.raises(FormatError, match=newer):
        decode_hdf5(bytes(data), name="v.h5", dataset="x")
    (tmp_path / "v.h5").write_bytes(bytes(data))
    with pytest.raises(FormatError, match=newer):  # counted from its header at open
        FileSource(tmp_path, format="hdf5", datasets=("x",), samples_per_file="header")
