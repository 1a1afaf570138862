"""Globs over object keys pick what ``glob.glob(recursive=True)`` picks over the same files."""

from __future__ import annotations

import glob
import os
from pathlib import Path

import pytest

from headrace.formats._url_glob import glob_root, key_matches

KEYS = [
    "_SUCCESS",
    "top.parquet",
    ".hidden.parquet",
    "year=2023/part-0.parquet",
    "year=2023/.part-0.parquet.crc",
    "year=2023/month=01/part-0.parquet",
    "year=2024/month=11/part-1.parquet",
    ".spark-staging/part-9.parquet",
    "sub/deeper/still/x.parquet",
]
PATTERNS = [
    "*.parquet",
    "**/*.parquet",
    "**",
    "*/*.parquet",
    "*/*/*.parquet",
    "year=*/month=1?/*.parquet",
    "year=202[34]/**/*.parquet",
    "**/.*",
    ".*/*.parquet",
    "sub/**/x.parquet",
    "*/*",
]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_keys_match_as_files_glob(pattern: str, tmp_path: Path) -> None:
    for key in KEYS:
        (tmp_path / key).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / key).write_bytes(b"")
    want = sorted(
        os.path.relpath(f, tmp_path)
        for f in glob.glob(str(tmp_path / pattern), recursive=True)
        if os.path.isfile(f)
    )
    assert sorted(k for k in KEYS if key_matches(k, pattern)) == want


def test_the_root_is_the_folder_above_the_first_wildcard() -> None:
    assert glob_root("s3://b/t/year=*/m=1/*.parquet") == "s3://b/t"
    assert glob_root("s3://b/t/*.parquet") == "s3://b/t"
    assert glob_root("/data/**/*.parquet", os.sep) == "/data"
