"""Header counts under ``on_corrupt="replace"`` (s49): a file whose header is damaged is
kept aside with a count of 0, as the policy wants, not raised; storage errors still are."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest

from headrace.errors import DataError, FormatError
from headrace.formats._file_counts import header_counts, resolve_counts
from headrace.formats._file_list import list_files
from headrace.formats._files import file_format


def _npys(folder: Path, damaged: tuple[int, ...]) -> None:
    folder.mkdir()
    for i in range(5):
        np.save(folder / f"f{i}.npy", np.zeros((i + 1, 2), np.float32))
    for i in damaged:
        # A header cut short (a partial copy), and one that is no NPY header at all.
        data = (folder / f"f{i}.npy").read_bytes()
        (folder / f"f{i}.npy").write_bytes(data[:20] if i % 2 else b"not an npy file")


def test_damaged_npy_headers_are_kept_aside_under_replace(tmp_path: Path) -> None:
    _npys(tmp_path / "d", (1, 4))
    files = list_files(str(tmp_path / "d"))
    corrupt: dict[int, DataError] = {}
    try:
        counts, stats = header_counts(files, file_format("npy"), None, 4, corrupt=corrupt)
        assert counts.tolist() == [1, 0, 3, 4, 0]
        assert sorted(corrupt) == [1, 4] and stats.files == 5
        assert all(isinstance(e, FormatError) for e in corrupt.values())
        assert str(tmp_path / "d" / "f1.npy") in str(corrupt[1])
        assert str(tmp_path / "d" / "f4.npy") in str(corrupt[4])
        # Without the policy (on_corrupt="raise"), the first is raised, the other named.
        with pytest.raises(FormatError, match=r"f1\.npy") as info:
            resolve_counts("header", str(tmp_path / "d"), files, file_format("npy"), None, 4)
        assert "the headers of 1 other file failed too" in info.value.__notes__[0]
        others = getattr(info.value, "others_failed")  # noqa: B009
        assert [str(tmp_path / "d" / "f4.npy") in str(e) for e in others] == [True]
        # Through resolve_counts, as FileSource calls it.
        corrupt.clear()
        got, _ = resolve_counts(
            "header", str(tmp_path / "d"), files, file_format("npy"), None, 4, corrupt=corrupt
        )
        assert got is not None and got.tolist() == [1, 0, 3, 4, 0] and sorted(corrupt) == [1, 4]
    finally:
        files.close()


def test_hdf5_files_damaged_or_without_the_dataset_are_kept_aside(tmp_path: Path) -> None:
    d = tmp_path / "d"
    d.mkdir()
    for i in range(4):
        with h5py.File(d / f"v{i}.h5", "w") as f:
            f.create_dataset("y" if i == 2 else "x", data=np.zeros((i + 2, 3), np.float32))
    data = (d / "v1.h5").read_bytes()
    (d / "v1.h5").write_bytes(data[:600])  # cut inside its metadata
    files = list_files(str(d))
    corrupt: dict[int, DataError] = {}
    try:
        counts, _ = header_counts(files, file_format("hdf5"), ("x",), 2, corrupt=corrupt)
        assert counts.tolist() == [2, 0, 0, 5]
        assert sorted(corrupt) == [1, 2]
        assert str(d / "v1.h5") in str(corrupt[1]) and str(d / "v2.h5") in str(corrupt[2])
    finally:
        files.close()


def test_a_file_gone_since_listing_still_raises_under_replace(tmp_path: Path) -> None:
    # Storage, not damage: a file deleted after the listing is no corrupt file to skip.
    _npys(tmp_path / "d", ())
    files = list_files(str(tmp_path / "d"))
    (tmp_path / "d" / "f3.npy").unlink()
    try:
        with pytest.raises(OSError, match=r"f3\.npy"):
            header_counts(files, file_format("npy"), None, 2, corrupt={})
    finally:
        files.close()


def test_a_file_source_counting_headers_replaces_a_damaged_files_samples(
    tmp_path: Path,
) -> None:
    # samples_per_file="header" raised at the first damaged header whatever on_corrupt
    # said: now its file has no sample, is named in corrupt_files, and the rest read.
    from headrace.formats import FileSource

    _npys(tmp_path / "d", (1,))
    folder = str(tmp_path / "d")
    with pytest.raises(FormatError, match=r"f1\.npy"):
        FileSource(folder, format="npy", samples_per_file="header")
    with FileSource(
        folder, format="npy", samples_per_file="header", on_corrupt="replace", max_corrupt=0.2
    ) as src:
        assert src.samples_per_epoch == 1 + 3 + 4 + 5
        assert list(src.corrupt_files) == [src.files.name(1)]
        got = src.read(0, np.arange(13))
        assert got["data"].shape == (13, 2)
    # Past max_corrupt: refused when the source is made, naming both.
    (tmp_path / "d" / "f3.npy").write_bytes(b"no header")
    with pytest.raises(DataError, match=r"2 of 5 files are corrupt"):
        FileSource(
            folder, format="npy", samples_per_file="header", on_corrupt="replace", max_corrupt=0.2
        )
