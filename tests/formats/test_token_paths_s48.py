"""TokenSource's folders and glob patterns, edge cases found in session 48.

A ``**`` pattern through a symbolic link to a folder above it: ``glob`` follows the link
until the path is too deep to resolve, matching each shard under it over and over. The
source refused it, but as "listed twice", which names no link and tells the user to use
a Mixture; it is refused as FileSource refuses it, naming the link.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from headrace.errors import ConfigError, ObjectNotFoundError
from headrace.formats import TokenSource


def test_a_recursive_pattern_through_a_link_to_a_folder_above_is_refused(
    tmp_path: Path,
) -> None:
    (tmp_path / "sub").mkdir()
    np.arange(100, dtype=np.uint16).tofile(tmp_path / "sub" / "a.bin")
    os.symlink("..", tmp_path / "sub" / "up")
    with pytest.raises(ConfigError, match=r"sub/up: a symbolic link to .*a folder above it"):
        TokenSource(str(tmp_path / "**" / "*.bin"), context=4, dtype="uint16")


def test_a_recursive_pattern_through_a_link_beside_reads_its_shards(tmp_path: Path) -> None:
    # A link to a folder elsewhere (not above it) is a folder like any other.
    (tmp_path / "data" / "sub").mkdir(parents=True)
    (tmp_path / "other").mkdir()
    np.arange(100, dtype=np.uint16).tofile(tmp_path / "data" / "sub" / "a.bin")
    np.arange(100, dtype=np.uint16).tofile(tmp_path / "other" / "b.bin")
    os.symlink(tmp_path / "other", tmp_path / "data" / "sub" / "linked")
    src = TokenSource(str(tmp_path / "data" / "**" / "*.bin"), context=4, dtype="uint16")
    assert [os.path.basename(f.path) for f in src.files] == ["a.bin", "b.bin"]


@pytest.mark.parametrize("given", ["s3:/bucket/data/*.bin", Path("s3://bucket/data/*.bin")])
def test_a_pattern_of_a_url_with_a_slash_lost_says_so(given: str | Path) -> None:
    # pathlib.Path makes s3://b/k s3:/b/k: a local pattern matching nothing, said as such
    # with no word of the URL it was, where the same file name said "did you mean".
    with pytest.raises(ObjectNotFoundError, match=r"did you mean 's3://bucket/data/\*\.bin'"):
        TokenSource(given, context=4, dtype="uint16")
