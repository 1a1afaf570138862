"""Class labels: ``FileSource(..., labels="folders" | {file: class}, classes=...)``.

A file's class is the folder it is in (``labels="folders"``): under a folder or prefix
the source was given, the first folder below it (torchvision's ``ImageFolder``:
``root/cat/a/1.jpg`` is ``cat``); in a list of files or a glob's matches, the folder
holding the file. Or a mapping names each file's class (``labels={"x.jpg": "cat"}``,
from a CSV beside a flat validation folder): its keys are the files' names under the
folder or prefix given, or for a list or glob the names as listed. Classes are numbered
in sorted order of the names the files have (``ImageFolder``'s ``classes``), or in the
order of a list given (``classes=train.classes``), so that a split missing a class
numbers the others as its training split does.
"""

from __future__ import annotations

import os
import unicodedata
from collections import Counter
from collections.abc import Collection, Mapping, Sequence

import numpy as np
from numpy.typing import NDArray

from headrace._messages import refuse_a_set
from headrace._warn import warn_user
from headrace.errors import ConfigError, DataError

__all__ = ["Labels", "check_classes", "check_labels", "file_classes"]

#: ``"folders"``, or each file's class name by its name.
Labels = str | dict[str, str]


def check_labels(labels: object) -> Labels | None:
    """``labels`` as the config keeps it: ``None``, ``"folders"`` or a dict (a copy)."""
    if labels is None or labels == "folders":
        return labels
    if isinstance(labels, Mapping):
        bad = next(
            (
                (k, c)
                for k, c in labels.items()
                if not isinstance(c, str) or not isinstance(k, str | os.PathLike)
            ),
            None,
        )
        if bad is not None:
            raise ConfigError(
                "labels maps each file's name to its class's name, e.g. "
                f"{{'x.jpg': 'cat'}} (got {bad!r}): class numbers follow from the names "
                "(give classes=[...] to number them)"
            )
        if not labels:
            raise ConfigError("labels is an empty mapping: name each file's class.")
        return {os.fspath(k): c for k, c in labels.items()}  # a list's Paths as listed
    if isinstance(labels, Sequence) and not isinstance(labels, str):
        raise ConfigError(
            f"labels says where a file's class comes from ('folders', or a mapping "
            f"{{file: class}}); a list numbers the classes: labels='folders', "
            f"classes={list(labels)!r}."
        )
    raise ConfigError(
        f"labels must be 'folders' (a file's class is its folder's name) or a mapping "
        f"{{file: class name}} (got {labels!r})."
    )


def check_classes(classes: object, labels: Labels | None) -> tuple[str, ...] | None:
    """``classes`` as the config keeps it: ``None`` or a tuple of names."""
    if classes is None:
        return None
    if labels is None:
        raise ConfigError(
            "classes= numbers the classes labels= finds: give labels='folders' (or a "
            "mapping {file: class}) with it."
        )
    refuse_a_set("classes", classes, "classes")
    if (
        isinstance(classes, str)
        or not isinstance(classes, Sequence)
        or not all(isinstance(c, str) for c in classes)
    ):
        raise ConfigError(
            f"classes must be a list of class names in label order, e.g. "
            f"classes=['cat', 'dog'] or classes=train.classes (got {classes!r})."
        )
    names = tuple(classes)
    if not names:
        raise ConfigError("classes is an empty list: give the class names in label order.")
    twice = [c for c, k in Counter(names).items() if k > 1]
    if twice:
        raise ConfigError(f"classes names {twice[0]!r} twice: each class once.")
    return names


def file_classes(
    keys: Sequence[str],
    *,
    rooted: bool,
    where: str,
    labels: Labels,
    classes: tuple[str, ...] | None,
    folders: Sequence[str] = (),
    other: str = "",
    listed: Mapping[str, Collection[str]] | None = None,
) -> tuple[tuple[str, ...], NDArray[np.int32]]:
    """The class names and each file's class number. ``keys``: the files' names relative
    to the folder or prefix ``where`` (``rooted``), else as listed (full names, whose
    parent folder counts); ``labels``: ``"folders"`` or a mapping of those names;
    ``classes``: the names in number order (``None``: sorted). ``folders``: the folders
    in ``where`` (a local folder's, or those an object store's listing shows): one that
    holds no file is refused with ``labels="folders"`` and no ``classes``, as
    ``ImageFolder`` refuses it; ``other``: what the listing said of the files of another
    format it left out (their folder may be one of those); ``listed``: the folders an
    object store's listing (a glob's) showed below each folder it went through, by URL
    (:func:`_tell_skipped_classes`)."""
    place = where or "the list of files"
    # The keys are read once (a packed name is decoded each time it is read: 0.3 s for
    # ImageNet's 1.28M), and only the class names after that.
    if isinstance(labels, dict):
        named = [labels.get(k, "") for k in keys]
        if "" in named:  # names in the other Unicode form (macOS's NFD, typed NFC)?
            nfc = {_nfc(k): c for k, c in labels.items()}
            named = [c or nfc.get(_nfc(k), "") for k, c in zip(keys, named, strict=True)]
    elif rooted:
        named = [head if sep else "" for head, sep, _ in (k.partition("/") for k in keys)]
    else:
        parents = [k.rpartition("/")[0] for k in keys]
        named = [p.rpartition("/")[2] for p in parents]
    found = set(named)
    if "" in found:
        loose = [i for i, c in enumerate(named) if not c]
        if isinstance(labels, dict):
            some = next(iter(labels))
            raise DataError(
                f"{place}: labels= names the classes of {len(keys) - len(loose):,} of its "
                f"{len(keys):,} files, not {keys[loose[0]]!r} ({len(loose):,} in all): its "
                f"keys are the files' names "
                + ("under the folder given" if rooted else "as listed")
                + f" (e.g. {keys[0]!r}; one of labels' keys is {some!r})"
            )
        at = f"directly in {where}" if rooted else "in no folder"
        raise DataError(
            f"{place}: labels='folders' takes each file's class from the folder it is in, "
            f"but {len(loose):,} of {len(named):,} files are {at} (e.g. {keys[loose[0]]!r}): "
            "move them into their class's folder, or leave them out"
        )
    if classes is None and labels == "folders" and rooted and not found >= set(folders):
        # A class folder with no file to read (a split's, or files of another format),
        # numbered, shifted the classes after it against a copy on object storage, where
        # an empty folder is at most a marker (``aws s3 sync`` copies none); left out,
        # against another split's. Refused, as ImageFolder refuses it (allow_empty=False).
        empty = sorted(set(folders) - found)
        raise DataError(
            f"{place}: {len(empty):,} class folder(s) hold no file to read: "
            + ", ".join(repr(e) for e in empty[:5])
            + (", ..." if len(empty) > 5 else "")
            + ", so the classes after them would be numbered otherwise than where they "
            "hold files (another split, a copy on object storage): remove it (them), or "
            "give classes=[...] (e.g. classes=train.classes) to number the classes yourself"
            + (f"; the listing {other}" if other else "")
        )
    if classes is None and labels == "folders" and not rooted:
        _tell_skipped_classes(set(parents), listed or {})
    if classes is None and labels == "folders" and rooted and len(found) == 1:
        _tell_one_class(keys, where, next(iter(found)))
    names = sorted(found) if classes is None else list(classes)
    number = {c: i for i, c in enumerate(names)}
    if classes is not None and not found <= set(number):
        # A folder copied from macOS (NFD) and a name typed elsewhere (NFC) print alike.
        by_form = {_nfc(c): i for i, c in enumerate(names)}
        number |= {c: by_form[_nfc(c)] for c in found - set(number) if _nfc(c) in by_form}
    unknown = sorted(found - set(number))
    if unknown:
        example = keys[named.index(unknown[0])]
        what = "class folders" if labels == "folders" else "classes labels= names"
        raise DataError(
            f"{place}: {len(unknown):,} of its {len(found):,} {what} are not among the "
            f"{len(names):,} classes= names: {unknown[:5]!r} (e.g. {example!r}): add them "
            "to the list, or leave their files out"
        )
    out = np.fromiter((number[c] for c in named), dtype=np.int32, count=len(named))
    out.setflags(write=False)
    return tuple(names), out


#: The most folders of class folders (``train/``) :func:`_tell_skipped_classes` lists.
_MOST_CLASS_ROOTS = 64


def _tell_skipped_classes(parents: set[str], listed: Mapping[str, Collection[str]]) -> None:
    """Warn where files listed (a glob, ``train/*/*.jpg``, or a list) leave out a class
    folder beside their own (``parents``: the folders they are in): numbered without it,
    the classes after it get other numbers than in a split where it holds files (``c`` 1
    here, 2 in a validation split whose ``b`` holds JPEGs). A folder read whole refuses
    such a folder, as ImageFolder does; listed files were numbered without it in silence
    until 2026-12-07 (on object storage too, where the folders beside are those a glob's
    listing showed, ``listed``). (The keys are read once, by the caller.)"""
    by_root: dict[str, set[str]] = {}
    for parent in parents:
        root, _, name = parent.rpartition("/")
        by_root.setdefault(root, set()).add(name)
    if len(by_root) > _MOST_CLASS_ROOTS:
        return  # not a tree of class folders
    for root, names in sorted(by_root.items()):
        if "://" in root:  # an object store's: no folder to list here, but its listing's
            beside = {n for n in listed.get(root, ()) if not n.startswith(".")}
        else:
            try:
                with os.scandir(root or ".") as it:
                    beside = {e.name for e in it if e.is_dir() and not e.name.startswith(".")}
            except OSError:
                continue
        skipped = sorted(beside - names)
        if skipped:
            warn_user(
                f"{root or '.'}: labels='folders' numbers the classes of the files listed "
                f"({len(names):,} folders), and {len(skipped):,} class folder(s) beside them "
                "hold none of those files: "
                + ", ".join(repr(n) for n in skipped[:5])
                + (", ..." if len(skipped) > 5 else "")
                + "; the classes after them are numbered otherwise than in a split where they "
                "hold files (torchvision's ImageFolder refuses such a folder): give "
                "classes=[...] (e.g. classes=train.classes) to number the classes yourself"
            )


def _tell_one_class(keys: Sequence[str], where: str, name: str) -> None:
    """Warn where the one class's files all lie in folders below it (``data/train/n01/``
    given as ``data/``): those folders are likely the classes, and every label is 0.
    ``ImageFolder`` says nothing; 200,000 ImageNet-like files read as one class until
    2026-12-07."""
    below = set()
    for k in keys:
        head, sep, _ = k[len(name) + 1 :].rpartition("/")
        if not sep:
            return  # a file of the class's own: a class of one folder, as given
        below.add(head.partition("/")[0])
    if len(below) < 2:
        return
    there = f"{where.rstrip('/')}/{name}" if where else name
    warn_user(
        f"{where}: labels='folders' found one class, {name!r}, whose {len(keys):,} files "
        f"lie in {len(below):,} folders below it (e.g. {keys[0]!r}): every label is 0. "
        f"If those folders are the classes, give the folder that holds them "
        f"({there!r}); to keep one class, pass classes=[{name!r}]"
    )


def _nfc(name: str) -> str:
    """``name`` in Unicode's composed form (NFC): "é" as one code point, not "e" and
    an accent (NFD, as macOS writes file names)."""
    return unicodedata.normalize("NFC", name)
