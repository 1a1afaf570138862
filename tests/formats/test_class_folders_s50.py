"""A class folder with no file of the format (``labels="folders"``) is refused, naming
it, as torchvision's ``ImageFolder`` refuses it ("Found no valid file for the classes
..."): numbered, it shifted every later class's number against a copy of the dataset on
object storage, where an empty folder is at most a marker or nothing at all
(``aws s3 sync``). ``classes=[...]`` numbers the classes as given, empty folders or not."""

from __future__ import annotations

from pathlib import Path

import pytest

from headrace.errors import DataError
from headrace.formats import FileSource, synthetic_arrays
from headrace.formats import write_sample_file as write


def tree(root: Path, layout: dict[str, int], fmt: str = "jpeg") -> Path:
    n = 0
    for name, count in layout.items():
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(count):
            write(fmt, root / name / f"{i}.{fmt}", synthetic_arrays(fmt, seed=n, shape=(8, 8, 3)))
            n += 1
    return root


def test_an_empty_class_folder_is_refused_naming_it_and_the_way_out(tmp_path: Path) -> None:
    root = tree(tmp_path / "val", {"ant": 2, "bee": 0, "cat": 2})
    with pytest.raises(DataError) as exc:
        FileSource(root, format="jpeg", labels="folders")
    said = str(exc.value)
    assert said.startswith(f"{root}: 1 class folder(s) hold no file to read: 'bee'"), said
    assert "remove it" in said and "classes=[...]" in said


def test_classes_given_number_around_it_and_without_it_the_rest_are_sorted(
    tmp_path: Path,
) -> None:
    root = tree(tmp_path / "val", {"ant": 2, "bee": 0, "cat": 2})
    given = FileSource(root, format="jpeg", labels="folders", classes=["ant", "bee", "cat"])
    assert given.classes == ("ant", "bee", "cat") and given.file_labels is not None
    assert given.file_labels.tolist() == [0, 0, 2, 2]
    (root / "bee").rmdir()
    removed = FileSource(root, format="jpeg", labels="folders")
    assert removed.classes == ("ant", "cat") and removed.file_labels is not None
    assert removed.file_labels.tolist() == [0, 0, 1, 1]


def test_a_folder_of_another_format_or_hidden_files_only_is_refused(tmp_path: Path) -> None:
    root = tree(tmp_path / "d", {"a": 1, "c": 1})
    tree(root, {"b": 1}, fmt="png")  # files a JPEG source does not read
    (root / "e").mkdir()
    (root / "e" / ".x.jpeg").write_bytes((root / "a" / "0.jpeg").read_bytes())
    (root / ".ipynb_checkpoints").mkdir()  # hidden: no class
    (root / "README").write_bytes(b"")  # a file beside the classes: no class
    with pytest.raises(DataError, match=r"2 class folder\(s\) hold no file to read: 'b', 'e'"):
        FileSource(root, format="jpeg", labels="folders")
    (root / "b" / "0.png").unlink()
    (root / "b").rmdir()
    (root / "e" / ".x.jpeg").unlink()
    (root / "e").rmdir()
    src = FileSource(root, format="jpeg", labels="folders")
    assert src.classes == ("a", "c")
