"""Slips in a path that read other data or said nothing useful: an empty path (an unset
variable) and a file named with a trailing '/'. Each refusal names the path and the fix."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from headrace.errors import ConfigError, HeadraceError
from headrace.formats import FileSource, PaddedRows, TableSource, TokenSource

MAKERS: dict[str, Callable[[Any], Any]] = {
    "tokens": lambda p: TokenSource(p, dtype="uint16", context=8),
    "files": lambda p: FileSource(p, format="npy"),
    "table": lambda p: TableSource(p),
}


@pytest.mark.parametrize("kind", list(MAKERS))
@pytest.mark.parametrize("listed", [False, True])
def test_an_empty_path_is_refused_not_read_as_the_current_folder(
    kind: str, listed: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: FileSource("") listed the folder the job ran in, and read its .npy files.
    np.save(tmp_path / "stray.npy", np.zeros(3))
    monkeypatch.chdir(tmp_path)
    given = [str(tmp_path / "stray.npy"), ""] if listed and kind == "files" else ""
    with pytest.raises(ConfigError, match=r"got an empty path \(''\).*an unset variable\?"):
        MAKERS[kind]([given] if listed and kind != "files" else given)


def test_a_row_file_of_an_empty_path_is_refused_naming_the_fix() -> None:
    # Before: "[Errno 2] : no such file", naming nothing.
    with pytest.raises(ConfigError, match=r"a row file got an empty path.*Pass the row file"):
        PaddedRows("", context=4, dtype="uint16")


@pytest.mark.parametrize(("kind", "name"), [("tokens", "t.bin"), ("table", "p.parquet")])
def test_a_file_named_with_a_trailing_slash_is_told_to_drop_it(
    kind: str, name: str, tmp_path: Path
) -> None:
    np.full(200, 1, np.uint16).tofile(tmp_path / "t.bin")
    pq.write_table(pa.table({"x": [1]}), tmp_path / "p.parquet")
    path = str(tmp_path / name) + os.sep
    with pytest.raises(HeadraceError) as info:
        MAKERS[kind](path)
    message = str(info.value)
    assert path in message and message.endswith("is a file, not a folder: drop the trailing '/'")


@pytest.mark.parametrize("kind", ["tokens", "table"])
@pytest.mark.parametrize("url", ["s3://", "gs:///x.bin"])
def test_an_object_url_without_a_bucket_says_so(kind: str, url: str) -> None:
    # Before: "s3:: an S3 URL needs a bucket" (the URL cut to 's3:'), or for the table
    # "s3://: s3:: ...".
    with pytest.raises(ConfigError, match=rf"^{re.escape(url)}: names no bucket"):
        MAKERS[kind](url)
