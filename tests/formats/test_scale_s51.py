"""Session 51's scale journey: an ImageNet-like folder of NPY files given one level too
high (``data/`` for ``data/train/<class>/``) reads as one class, every label 0: told.

(Its other finding, window order tables kept after their window is done, is the kept
tables' budget, ``plan._permute.TABLE_BYTES``: 64 MiB however many windows, checked
then at 10-40 windows of a sparse 10 GiB file, context 128.)
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from headrace.formats import FileSource


def _npy_tree(root: Path, paths: list[str]) -> None:
    for i, name in enumerate(paths):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        np.save(root / name, np.full((2, 2), i, np.float32))


def test_folders_one_level_too_high_are_told(tmp_path: Path) -> None:
    # data/train/<class>/x.npy given as data/: one class, 'train', every label 0, silently
    # (ImageFolder does the same). The folder that holds the classes is named.
    _npy_tree(tmp_path, [f"train/n{c:02d}/{i}.npy" for c in range(3) for i in range(2)])
    with pytest.warns(UserWarning, match=r"one class, 'train'.*3 folders below it") as got:
        src = FileSource(tmp_path, format="npy", labels="folders")
    assert src.classes == ("train",)
    assert str(tmp_path / "train") in str(got[0].message)
    src.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        FileSource(tmp_path / "train", format="npy", labels="folders").close()  # 3 classes
        FileSource(tmp_path, format="npy", labels="folders", classes=["train"]).close()


def test_one_class_with_its_files_in_it_is_not_told(tmp_path: Path) -> None:
    _npy_tree(tmp_path, ["only/a.npy", "only/b.npy", "only/deeper/c.npy"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        src = FileSource(tmp_path, format="npy", labels="folders")
    assert src.classes == ("only",)
    src.close()
