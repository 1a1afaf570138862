"""Local files read by ranges that changed since they were listed (session 48)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from headrace.errors import ObjectNotFoundError, StorageError
from headrace.formats._file_list import FileList, list_files
from headrace.io import RangeReader, ReaderConfig


def _listed_then_cut(tmp_path: Path) -> FileList:
    path = tmp_path / "a.bin"
    path.write_bytes(bytes(range(256)) * 16)  # 4096 bytes
    files = list_files([str(path)])
    os.truncate(path, 1000)
    return files


def test_a_file_cut_short_after_listing_is_said_changed_reading_by_ranges(
    tmp_path: Path,
) -> None:
    # A span past the new end met end of file: a bare "reached end of file after N
    # bytes" that did not say the file changed since it was listed, nor what to do.
    files = _listed_then_cut(tmp_path)
    fetch = files.local_ranges(0)
    buf = np.empty(4096, dtype=np.uint8)
    with pytest.raises(StorageError, match=r"a\.bin: truncated or changed file.*open the source"):
        fetch([(0, 100), (3000, 3100)], buf)


def test_a_file_cut_short_after_listing_is_said_changed_reading_by_ranges_odirect(
    tmp_path: Path,
) -> None:
    files = _listed_then_cut(tmp_path)
    with RangeReader(ReaderConfig(strategy="odirect-serial")) as reader:
        fetch = files.local_ranges(0, reader)
        buf = np.empty(4096, dtype=np.uint8)
        with pytest.raises(StorageError, match=r"truncated or changed file.*open the source"):
            fetch([(0, 4096)], buf)


def test_a_range_past_the_listed_end_of_an_unchanged_file_is_still_an_eof(
    tmp_path: Path,
) -> None:
    from headrace.errors import ReadEOFError

    path = tmp_path / "a.bin"
    path.write_bytes(bytes(100))
    files = list_files([str(path)])
    buf = np.empty(200, dtype=np.uint8)
    with pytest.raises(ReadEOFError, match=r"a\.bin: read of bytes \[0, 200\)"):
        files.local_ranges(0)([(0, 200)], buf)


@pytest.mark.parametrize("size", [1000, 5000])
def test_a_whole_file_of_another_size_than_listed_says_what_to_do(
    tmp_path: Path, size: int
) -> None:
    # Read whole, it was "truncated or changed object: ...; refusing to decode it",
    # without the fix that a read by ranges names.
    path = tmp_path / "a.bin"
    path.write_bytes(bytes(4096))
    files = list_files([str(path)])
    os.truncate(path, size)
    with pytest.raises(StorageError, match=r"a\.bin: truncated or changed .*open the source again"):
        files.fetch(0)


def test_a_file_deleted_after_listing_is_said_gone_reading_by_ranges_odirect(
    tmp_path: Path,
) -> None:
    # As a pread's or a whole file's read says it: it was "no such file; did you mean
    # 'b.bin'?", a typo guessed for a file the listing found.
    for n in "ab":
        (tmp_path / f"{n}.bin").write_bytes(bytes(8192))
    files = list_files([str(tmp_path / "a.bin"), str(tmp_path / "b.bin")], local_read="odirect")
    os.remove(tmp_path / "a.bin")
    buf = np.empty(8192, dtype=np.uint8)
    with RangeReader(ReaderConfig(strategy="odirect-serial")) as reader:
        with pytest.raises(ObjectNotFoundError, match=r"a\.bin: no such file now; .* listed it"):
            files.local_ranges(0, reader)([(0, 4096)], buf)
