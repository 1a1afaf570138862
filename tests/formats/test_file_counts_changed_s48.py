"""Header counts of local files that changed after they were listed (session 48)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from headrace.errors import ObjectNotFoundError, StorageError
from headrace.formats._file_counts import header_counts
from headrace.formats._file_list import FileList, list_files
from headrace.formats._files import FILE_FORMATS


def _listed(tmp_path: Path) -> FileList:
    for i in range(3):
        np.save(tmp_path / f"{i}.npy", np.arange(100 * (i + 1), dtype=np.int64))
    return list_files(tmp_path, extensions=(".npy",))


def test_a_file_deleted_after_listing_is_said_gone_when_counted(tmp_path: Path) -> None:
    # It was the open's "no such file", with a "did you mean" guess at a typo.
    files = _listed(tmp_path)
    os.remove(tmp_path / "1.npy")
    with pytest.raises(ObjectNotFoundError, match=r"1\.npy: no such file now; .* listed it"):
        header_counts(files, FILE_FORMATS["npy"], None, 2)


def test_a_file_cut_short_after_listing_is_said_changed_when_counted(tmp_path: Path) -> None:
    # Its header read met end of file: a bare "reached end of file after 0 bytes".
    files = _listed(tmp_path)
    os.truncate(tmp_path / "2.npy", 60)
    with pytest.raises(StorageError, match=r"2\.npy: truncated or changed file.*open the source"):
        header_counts(files, FILE_FORMATS["npy"], None, 2)


def test_unchanged_files_are_counted(tmp_path: Path) -> None:
    counts, stats = header_counts(_listed(tmp_path), FILE_FORMATS["npy"], None, 2)
    assert counts.tolist() == [100, 200, 300] and stats.files == 3
