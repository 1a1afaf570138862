"""A glob's extension matches case by case (``glob.glob``'s meaning, kept); the files it
misses only by that case are told, not left out in silence.

A folder's listing, and torchvision's ``ImageFolder``, take ``.JPG`` as ``.jpg``; a camera
names its photos ``.JPG``, a phone or a script ``.jpg``. ``FileSource("train/*/*.jpg",
labels="folders")`` over such a tree read the ``.jpg`` files alone: a class whose files
are all ``.JPG`` had no number, so every class after it was numbered one lower than
``ImageFolder("train")`` numbers it, without a word.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from headrace.formats import FileSource, write_sample_file


def _jpeg(path: Path, value: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_sample_file("jpeg", path, np.full((8, 8, 3), value, np.uint8))


def test_a_glob_tells_the_files_its_extension_case_misses(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _jpeg(tmp_path / "ant" / "0.jpg", 0)
    _jpeg(tmp_path / "bee" / "0.JPG", 1)  # a class of .JPG files only
    _jpeg(tmp_path / "bee" / "1.Jpg", 2)
    _jpeg(tmp_path / "cat" / "0.jpg", 3)
    _jpeg(tmp_path / "cat" / "1.jpeg", 4)  # another extension: not this pattern's
    # (The class folder it skips is warned of too: test_glob_classes_s53.py.)
    with caplog.at_level("WARNING", logger="headrace"), pytest.warns(UserWarning, match="'bee'"):
        src = FileSource(f"{tmp_path}/*/*.jpg", format="jpeg", labels="folders")
    # What glob.glob matches, as before: the pattern's meaning is kept.
    assert sorted(src.files.keys) == [f"{tmp_path}/ant/0.jpg", f"{tmp_path}/cat/0.jpg"]
    assert src.classes == ("ant", "cat")
    said = (
        f"left out 2 file(s) that the glob pattern {tmp_path}/*/*.jpg misses only by the "
        f"case of its extension (e.g. '{tmp_path}/bee/0.JPG')"
    )
    assert src.files.other == 2 and said in caplog.text, caplog.text
    assert "[jJ][pP][gG]" in caplog.text
    # Written to match either case, every one is read, and nothing is said.
    caplog.clear()
    with caplog.at_level("WARNING", logger="headrace"):
        both = FileSource(f"{tmp_path}/*/*.[jJ][pP][gG]", format="jpeg", labels="folders")
    assert both.classes == ("ant", "bee", "cat") and len(both.files) == 4
    assert both.files.other == 0 and "left out" not in caplog.text
