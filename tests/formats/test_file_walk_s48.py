"""A folder's listing of files that go while it is walked (session 48)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import headrace.formats._file_walk as file_walk
from headrace.errors import ObjectNotFoundError
from headrace.formats import FileSource
from headrace.formats._file_list import list_files


def _files(root: Path) -> None:
    for i in range(4):
        np.save(root / f"{i}.npy", np.full(3, i))


def test_a_file_deleted_between_the_walk_and_its_stat_is_not_listed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The folder's listing found it; deleted before its stat (a clean-up at work in the
    # folder), it was "2.npy: no such file; did you mean '3.npy'?", and no listing.
    _files(tmp_path)
    stat = file_walk.stat_listed

    def deleted_first(path: str) -> os.stat_result:
        if path.endswith("2.npy"):
            os.remove(path)
        return stat(path)

    monkeypatch.setattr(file_walk, "stat_listed", deleted_first)
    files = list_files(tmp_path, extensions=(".npy",))
    assert list(files.keys) == ["0.npy", "1.npy", "3.npy"]
    monkeypatch.undo()
    src = FileSource(tmp_path, format="npy", samples_per_file="header")
    assert src.counts.tolist() == [3, 3, 3]
    src.close()


def test_a_dangling_link_is_still_refused_by_name(tmp_path: Path) -> None:
    _files(tmp_path)
    os.symlink(tmp_path / "gone.npy", tmp_path / "4.npy")
    with pytest.raises(ObjectNotFoundError, match=r"4\.npy: a symbolic link to .*gone\.npy"):
        list_files(tmp_path, extensions=(".npy",))


def test_a_named_file_that_is_missing_is_still_refused(tmp_path: Path) -> None:
    _files(tmp_path)
    with pytest.raises(ObjectNotFoundError, match=r"5\.npy: no such file"):
        list_files([str(tmp_path / "0.npy"), str(tmp_path / "5.npy")])


def test_a_recursive_glob_through_a_link_to_a_folder_above_is_refused(tmp_path: Path) -> None:
    # "d/**/*.npy" followed x/up -> .. round and round (40 times, until ELOOP): each file
    # listed 41 times, silently, where the folder "d" refuses such a link by name.
    from headrace.errors import ConfigError

    (tmp_path / "x").mkdir()
    _files(tmp_path / "x")
    os.symlink("..", tmp_path / "x" / "up")
    for pattern in (f"{tmp_path}/**/*.npy", f"{tmp_path}/x/up/**/*.npy"):
        with pytest.raises(ConfigError, match=r"x/up.*a folder above it.*over and over"):
            list_files(pattern)
    with pytest.raises(ConfigError, match=r"x/up.*a folder above it"):
        list_files([str(tmp_path / "x" / "0.npy"), f"{tmp_path}/**/*.npy"])


def test_a_recursive_glob_through_a_link_to_a_sibling_folder_is_read(tmp_path: Path) -> None:
    # A file reached by two links is two names (as a copy would be): kept.
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
    _files(tmp_path / "a")
    os.symlink("../a", tmp_path / "b" / "a")
    files = list_files(f"{tmp_path}/**/*.npy")
    assert len(files) == 8


def test_a_folder_deleted_while_the_walk_reaches_it_is_not_listed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Found in its parent's listing, gone when its own is asked: it was "no such file;
    # did you mean", and no listing (as a file deleted before its stat).
    import shutil

    for d in ("a", "b", "c"):
        (tmp_path / d).mkdir()
        _files(tmp_path / d)
    listed = file_walk._listed

    def deleted_first(folder: str) -> file_walk._Listed:
        if folder.endswith("b"):
            shutil.rmtree(folder)
        return listed(folder)

    monkeypatch.setattr(file_walk, "_listed", deleted_first)
    files = list_files(tmp_path, extensions=(".npy",))
    assert [k.partition("/")[0] for k in files.keys] == ["a"] * 4 + ["c"] * 4


def test_a_folder_the_walk_may_not_list_says_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A volume's lost+found (root's, mode 700) under a dataset's folder: it was only
    # "lost+found: permission denied". (Fault injection: tests may run as root.)
    from headrace.errors import PermissionDeniedError

    for d in ("a", "lost+found"):
        (tmp_path / d).mkdir()
        _files(tmp_path / d)
    listed = file_walk._listed

    def denied(folder: str) -> file_walk._Listed:
        if folder.endswith("lost+found"):
            raise PermissionError(13, "Permission denied", folder)
        return listed(folder)

    monkeypatch.setattr(file_walk, "_listed", denied)
    with pytest.raises(
        PermissionDeniedError, match=r"(?s)lost\+found: permission denied.*below .* glob pattern"
    ):
        list_files(tmp_path, extensions=(".npy",))
