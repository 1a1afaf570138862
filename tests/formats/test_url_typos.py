"""An object URL with a typo in its scheme (``s3:/b/k``, ``s3:b/k``, ``S3://b/k``) is read
as a local path; what it is told names the URL it was likely meant to be. Before
2026-12-03 a ``store_options`` refusal named neither the path nor the typo, and a
missing local path said only "no such file"."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from headrace.errors import ConfigError, ObjectNotFoundError
from headrace.formats import FileSource, TableSource, TokenSource
from headrace.io._file import url_typo

OPTS = {"region": "us-east-1"}
MAKERS: dict[str, Callable[..., Any]] = {
    "tokens": lambda p, **kw: TokenSource(p, dtype="uint16", context=8, **kw),
    "files": lambda p, **kw: FileSource(p, format="npy", **kw),
    "table": lambda p, **kw: TableSource(p, **kw),
}


@pytest.mark.parametrize("kind", list(MAKERS))
@pytest.mark.parametrize(
    ("given", "meant"),
    [
        ("s3:/bkt/d/x.bin", "s3://bkt/d/x.bin"),
        ("gs:bkt/x.bin", "gs://bkt/x.bin"),
        ("s3//bkt/d/x.bin", "s3://bkt/d/x.bin"),  # the colon left out: not recognised before
    ],
)
def test_a_mistyped_url_is_told_what_it_was_likely_meant_to_be(
    kind: str, given: str, meant: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # (the relative path exists nowhere)
    with pytest.raises(ConfigError) as info:
        MAKERS[kind](given, store_options=OPTS)
    assert "store_options apply to object-store URLs only" in str(info.value)
    assert f"{given!r} is read as a local path: did you mean {meant!r}?" in str(info.value)
    with pytest.raises(ObjectNotFoundError) as found:
        MAKERS[kind](given)
    assert str(found.value).endswith(f"read as a local path: did you mean {meant!r}?")


def test_url_typo_leaves_urls_and_plain_paths_alone() -> None:
    assert url_typo("S3://b/k") == "s3://b/k"
    assert url_typo("https:/host/a") == "https://host/a"
    assert url_typo("s3//b/k") == url_typo("s3:///b/k") == "s3://b/k"
    for path in (
        *("s3://b/k", "data/x.bin", "/abs/x.bin", "C:/x.bin", "mailto:x", "s3:", None),
        *("s3/b/k", "data//x.bin", "s3//", "./s3//b/k"),  # one slash, no scheme, no rest
    ):
        assert url_typo(path) is None


def test_local_files_with_store_options_are_told_to_leave_them_out(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not local files; leave store_options out"):
        FileSource([str(tmp_path / "a.npy")], format="npy", store_options=OPTS)


@pytest.mark.parametrize("kind", list(MAKERS))
def test_a_misspelt_local_path_is_told_the_one_beside_it(kind: str, tmp_path: Path) -> None:
    # It said "no such file" (or directory) alone, for a letter left out or swapped.
    data = tmp_path / "shakespeare"
    data.mkdir()
    (data / "train.bin").write_bytes(bytes(4096))
    (data / "part.parquet").write_bytes(b"")
    given, meant = {
        "tokens": ("shakespear/trian.bin", "shakespeare/train.bin"),
        "files": ("shakespear", "shakespeare"),
        "table": ("shakespeare/part.parqet", "shakespeare/part.parquet"),
    }[kind]
    with pytest.raises(ObjectNotFoundError) as found:
        MAKERS[kind](str(tmp_path / given))
    assert str(found.value).endswith(f"; did you mean {str(tmp_path / meant)!r}?")
    with pytest.raises(ObjectNotFoundError) as found:  # nothing close: no guess
        MAKERS[kind](str(tmp_path / "zzzz.bin"))
    assert "did you mean" not in str(found.value)
