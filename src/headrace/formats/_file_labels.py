"""Class labels from folder names: ``FileSource(..., labels="folders")``.

A file's class is the folder it is in: under a folder or prefix the source was
given, the first folder below it (torchvision's ``ImageFolder``: ``root/cat/a/1.jpg``
is ``cat``); in a list of files or a glob's matches, the folder holding the file.
Classes are numbered in sorted order of their names (``ImageFolder``'s ``classes``),
or in the order of a list given (``labels=train.classes``), so that a split missing
a class numbers the others as its training split does.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from headrace._messages import refuse_a_set
from headrace.errors import ConfigError, DataError

__all__ = ["Labels", "check_labels", "folder_labels"]

#: ``"folders"``, or the class names in label order.
Labels = str | tuple[str, ...]


def check_labels(labels: object) -> Labels | None:
    """``labels`` as the config keeps it: ``None``, ``"folders"`` or a tuple of names."""
    if labels is None or labels == "folders":
        return labels
    if isinstance(labels, str):
        raise ConfigError(
            f"labels must be 'folders' (a file's class is its folder's name) or the list "
            f"of class names in label order (got {labels!r})."
        )
    refuse_a_set("labels", labels, "classes")
    if not isinstance(labels, Sequence) or not all(isinstance(c, str) for c in labels):
        raise ConfigError(
            f"labels must be 'folders' or a list of class names, e.g. "
            f"labels=['cat', 'dog'] or labels=train.classes (got {labels!r})."
        )
    names = tuple(labels)
    if not names:
        raise ConfigError("labels is an empty list of classes: give their names, or 'folders'.")
    twice = [c for c, k in Counter(names).items() if k > 1]
    if twice:
        raise ConfigError(f"labels names the class {twice[0]!r} twice: each class once.")
    return names


def folder_labels(
    keys: Sequence[str], *, rooted: bool, where: str, labels: Labels
) -> tuple[tuple[str, ...], NDArray[np.int32]]:
    """The class names and each file's class number: the folder each of ``keys`` is in
    (``rooted``: keys relative to the folder or prefix ``where``, whose first folder
    counts; else full names, whose parent folder counts), numbered by ``labels``
    (``"folders"``: the sorted names)."""
    # The keys are read once (a packed name is decoded each time it is read: 0.3 s for
    # ImageNet's 1.28M), and only the folders after that.
    if rooted:
        folders = [head if sep else "" for head, sep, _ in (k.partition("/") for k in keys)]
    else:
        folders = [k.rpartition("/")[0].rpartition("/")[2] for k in keys]
    found = set(folders)
    if "" in found:
        loose = [i for i, f in enumerate(folders) if not f]
        at = f"directly in {where}" if rooted else "in no folder"
        raise DataError(
            f"{where or 'the list of files'}: labels='folders' takes each file's class from "
            f"the folder it is in, but {len(loose):,} of {len(folders):,} files are {at} "
            f"(e.g. {keys[loose[0]]!r}): move them into their class's folder, or leave them "
            "out"
        )
    names = sorted(found) if labels == "folders" else list(labels)
    number = {c: i for i, c in enumerate(names)}
    unknown = sorted(found - set(number))
    if unknown:
        example = keys[folders.index(unknown[0])]
        raise DataError(
            f"{where or 'the list of files'}: {len(unknown):,} of its {len(found):,} class "
            f"folders are not among the {len(names):,} classes labels= names: "
            f"{unknown[:5]!r} (e.g. {example!r}): add them to the list, or leave their "
            "files out"
        )
    out = np.fromiter((number[f] for f in folders), dtype=np.int32, count=len(folders))
    out.setflags(write=False)
    return tuple(names), out
