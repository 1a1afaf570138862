"""Class names in either Unicode form: folders copied from macOS (NFD) against
classes= or labels= typed on another host (NFC)."""

from __future__ import annotations

import unicodedata
from pathlib import Path

import numpy as np

from headrace.formats import FileSource
from headrace.pipeline import Loader

NFC = unicodedata.normalize("NFC", "café")
NFD = unicodedata.normalize("NFD", "café")


def _folders(root: Path, names: list[str]) -> None:
    for n, name in enumerate(names):
        (root / name).mkdir()
        np.save(root / name / "0.npy", np.full(2, n, np.int32))


def _labels(root: Path, **kw: object) -> dict[int, int]:
    src = FileSource(root, format="npy", shuffle="none", **kw)
    try:
        with Loader(src, batch_size=2, seed=0, steps=1) as loader:
            (batch,) = list(loader)
    finally:
        src.close()
    return dict(zip(batch["data"][:, 0].tolist(), batch["label"].tolist(), strict=True))


def test_classes_match_class_folders_written_in_the_other_unicode_form(tmp_path: Path) -> None:
    # NFD "café" was "not among the classes= names: ['café']", the two spellings
    # printing alike.
    assert NFC != NFD
    _folders(tmp_path, [NFD, "dog"])
    assert _labels(tmp_path, labels="folders", classes=["dog", NFC]) == {0: 1, 1: 0}


def test_a_label_mapping_matches_file_names_in_the_other_unicode_form(tmp_path: Path) -> None:
    _folders(tmp_path, [NFD, "dog"])
    labels = {f"{NFC}/0.npy": "x", "dog/0.npy": "y"}
    assert _labels(tmp_path, labels=labels) == {0: 0, 1: 1}
