"""A list naming one file twice, as file:// URLs spelt two ways (session 48)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from headrace.errors import ConfigError
from headrace.formats._file_list import list_files


@pytest.mark.parametrize("other", ["x/../a.npy", "./a.npy", "/a.npy"])
def test_a_file_url_spelt_two_ways_is_listed_twice(tmp_path: Path, other: str) -> None:
    # As local paths are ("d/./a.npy" is "d/a.npy"): each spelling was read as a file of
    # its own, so the file's samples came twice an epoch, silently.
    (tmp_path / "x").mkdir()
    np.save(tmp_path / "a.npy", np.arange(3))
    np.save(tmp_path / "b.npy", np.arange(3))
    urls = [f"file://{tmp_path}/a.npy", f"file://{tmp_path}/b.npy", f"file://{tmp_path}/{other}"]
    with pytest.raises(ConfigError, match=r"a\.npy: listed twice"):
        list_files(urls)


def test_file_urls_of_two_files_are_both_listed(tmp_path: Path) -> None:
    (tmp_path / "x").mkdir()
    np.save(tmp_path / "a.npy", np.arange(3))
    np.save(tmp_path / "x" / "a.npy", np.arange(3))
    files = list_files([f"file://{tmp_path}/a.npy", f"file://{tmp_path}/x/a.npy"])
    assert list(files.keys) == ["a.npy", "x/a.npy"]
    files.close()
