"""A glob (or list) of files whose class folders are numbered by name (session 53).

Read as a folder, a tree whose class folder holds no file to read is refused, as
torchvision's ImageFolder refuses it: numbered without it, the classes after it would
get other numbers than in a split where it holds files. Read through a glob
(``train/*/*.jpg``) or a list of the files, the same tree was numbered without it in
silence: ``c`` got 1 here and 2 in a validation split whose ``b`` holds JPEGs.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from headrace.formats import FileSource, encode


def _tree(root: Path, holds: dict[str, str]) -> None:
    pixels = np.zeros((4, 4, 3), dtype=np.uint8)
    for name, ext in holds.items():
        (root / name).mkdir(parents=True)
        if ext:
            fmt = "png" if ext == "png" else "jpeg"
            (root / name / f"0.{ext}").write_bytes(encode(fmt, pixels))


@pytest.mark.parametrize("given", ["glob", "list"])
def test_a_class_folder_the_files_skip_is_warned_of(tmp_path: Path, given: str) -> None:
    _tree(tmp_path / "train", {"a": "jpg", "b": "png", "c": "jpg"})
    files: str | list[str] = str(tmp_path / "train" / "*" / "*.jpg")
    if given == "list":
        files = sorted(str(p) for p in (tmp_path / "train").glob("*/*.jpg"))
    with pytest.warns(UserWarning, match=r"'b'.*classes=") as caught:
        src = FileSource(files, format="jpeg", labels="folders")
    said = str(next(w.message for w in caught if "'b'" in str(w.message)))
    assert "train" in said and "numbered" in said, said
    assert src.classes == ("a", "c")
    src.close()
    # Numbered by the user: nothing to say.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        FileSource(files, format="jpeg", labels="folders", classes=["a", "b", "c"]).close()


def test_every_class_folder_with_files_says_nothing(tmp_path: Path) -> None:
    _tree(tmp_path / "train", {"a": "jpg", "b": "jpg", ".cache": ""})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        src = FileSource(str(tmp_path / "train" / "*" / "*.jpg"), format="jpeg", labels="folders")
    assert src.classes == ("a", "b")
    src.close()
