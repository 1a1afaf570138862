"""A class folder that holds no file (``labels="folders"``) was dropped and every class
after it numbered one lower, so a validation folder with an empty class folder gave its
samples other labels than the training folder's, without a word. Since 2026-12-07
(session 50) it is refused, as torchvision's ``ImageFolder`` refuses it, and
``classes=train.classes`` numbers the split as training."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from headrace.errors import DataError
from headrace.formats import FileSource, synthetic_arrays
from headrace.formats import write_sample_file as write


def folder(root: Path, layout: dict[str, int], fmt: str = "jpeg") -> Path:
    n = 0
    for name, count in layout.items():
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(count):
            write(fmt, root / name / f"{i}.{fmt}", synthetic_arrays(fmt, seed=n, shape=(8, 8, 3)))
            n += 1
    return root


def test_an_empty_class_folder_is_refused_and_classes_given_keep_the_numbers(
    tmp_path: Path,
) -> None:
    # Since 2026-12-07 refused, as ImageFolder refuses it (test_class_folders_s50.py).
    train = FileSource(
        folder(tmp_path / "train", {"ant": 1, "bee": 1, "cat": 1}), format="jpeg", labels="folders"
    )
    val_root = folder(tmp_path / "val", {"ant": 2, "bee": 0, "cat": 2})
    with pytest.raises(DataError, match=r"1 class folder\(s\) hold no file to read: 'bee'"):
        FileSource(val_root, format="jpeg", labels="folders")
    val = FileSource(val_root, format="jpeg", labels="folders", classes=train.classes)
    assert val.classes == train.classes == ("ant", "bee", "cat")
    # cat is 2 in both splits (it was 1 in val: the model's class 1 is bee)
    assert [val.classes[c] for c in val.file_labels] == [k.split("/")[0] for k in val.files.keys]
    assert val.file_labels.tolist() == [0, 0, 2, 2]


def test_a_folder_of_another_format_or_hidden_files_is_refused_too(tmp_path: Path) -> None:
    root = folder(tmp_path / "d", {"a": 1, "c": 1})
    folder(root, {"b": 1}, fmt="png")  # files a JPEG source does not read
    (root / "e").mkdir()
    (root / "e" / ".x.jpg").write_bytes((root / "a" / "0.jpeg").read_bytes())
    (root / ".ipynb_checkpoints").mkdir()  # hidden: no class, as before
    with pytest.raises(DataError, match=r"2 class folder\(s\) hold no file to read: 'b', 'e'"):
        FileSource(root, format="jpeg", labels="folders")
    src = FileSource(root, format="jpeg", labels="folders", classes=["a", "b", "c", "e"])
    assert src.file_labels.tolist() == [0, 2]
    assert np.bincount(src.file_labels, minlength=len(src.classes)).tolist() == [1, 0, 1, 0]


def test_classes_given_or_a_list_of_files_are_as_before(tmp_path: Path) -> None:
    root = folder(tmp_path / "d", {"a": 1, "b": 0, "c": 1})
    given = FileSource(root, format="jpeg", labels="folders", classes=["c", "a"])
    assert given.classes == ("c", "a") and given.file_labels.tolist() == [1, 0]
    # A list names no folder that holds nothing: read, and (since 2026-12-07) the class
    # folder beside its files that it skips is warned of (tests/formats/
    # test_glob_classes_s53.py).
    with pytest.warns(UserWarning, match=r"'b'.*classes="):
        listed = FileSource(sorted(root.glob("*/*.jpeg")), format="jpeg", labels="folders")
    assert listed.classes == ("a", "c")
