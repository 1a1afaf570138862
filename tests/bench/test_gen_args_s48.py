"""``headrace gen``'s flags (s48)."""

from __future__ import annotations

from pathlib import Path

import pytest

from headrace.cli import main


@pytest.mark.parametrize("flag", ["--root", "--staging", "--endpoint", "--dlio"])
def test_an_empty_value_is_refused_not_taken_for_no_flag(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    flag: str,
) -> None:
    # `headrace gen tokens --root "$DATA"` with DATA unset wrote the dataset into
    # ~/.cache/headrace/bench (bench refuses it); `--staging ""` staged it there.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    root = [] if flag == "--root" else ["--root", (tmp_path / "dest").as_uri()]
    workload = [] if flag == "--dlio" else ["tokens"]
    argv = ["gen", *workload, *root, flag, "", "--token-file-gib", "0.0001", "-q"]
    assert main(argv) == 2
    line = capsys.readouterr().err.splitlines()[-1]
    assert f"headrace gen: {flag} '' is empty" in line, line
    assert not (tmp_path / "cache").exists() and not (tmp_path / "dest").exists()


def test_a_full_disk_error_naming_a_file_says_the_free_space(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Creating a file on a full filesystem (or one out of inodes) fails naming the file:
    # the message said "PATH: No space left on device", not how much room there was.
    import errno
    import os

    def full(src: str, dst: str) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", src)  # fault injection

    monkeypatch.setattr(os, "replace", full)
    root = tmp_path / "r"
    argv = ["gen", "hdf5", "--files", "1", "--root", str(root), "-q"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"headrace gen: {root}" in err and ".part: No space left on device (" in err
    assert "bytes free there)" in err and "Traceback" not in err
