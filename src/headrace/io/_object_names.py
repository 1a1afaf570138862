"""Object names obstore cannot hold, and what a read or a listing of one is told.

obstore's paths (object_store's ``Path``) have no empty segment: a key with ``//``
in it is refused, a ``/`` at a key's start or end is dropped, and so is every empty
segment of a URL's prefix. Dropped, a name reads another object (``s3://b/d//x.bin``
read ``d/x.bin``), and two objects can be listed under one name (``d/x.bin/`` beside
``d/x.bin``); refused, one such key stops a whole listing. Here those names are
refused before any request, and the listings that meet them say which key and how
to get past it.
"""

from __future__ import annotations

import itertools
import operator
import posixpath
import re

from headrace.errors import ConfigError, StorageError
from headrace.io._object_info import ObjectInfo, item_key
from headrace.io._retry import summarize

__all__ = [
    "check_key",
    "empty_segment",
    "empty_segment_error",
    "named_once",
    "refuse_dot_segment",
    "unlistable",
]


def empty_segment(path: str) -> bool:
    """Whether ``path`` (a key, or a URL's path after its bucket) has an empty segment:
    ``//`` inside it, or a ``/`` at its start (a URL's own first slash aside) or end."""
    return "//" in path or path.startswith("/") or path.endswith("/")


def empty_segment_error(url: str, path: str) -> ConfigError:
    """What a read of an object whose name has an empty segment is told, and why.

    obstore (object_store's ``Path``) cannot name such an object: it drops a
    leading or trailing ``/`` from a key, and ``//`` from a URL's prefix, and so
    would read another object (``d//x.bin`` read ``d/x.bin``'s bytes, without a
    word); a key with ``//`` inside it is refused by obstore with a parse error.
    """
    meant = "/".join(part for part in path.split("/") if part)
    return ConfigError(
        f"{url}: {path!r} has an empty path segment ('//', or a '/' at the start or end "
        f"of a key); obstore cannot name such an object and would read {meant!r} "
        "instead, another object. Copy the object to a name without one (e.g. "
        "aws s3 cp 's3://bucket/d//x.bin' 's3://bucket/d/x.bin'), or name it without "
        "the repeated '/' if that is the object meant"
    )


def refuse_dot_segment(url: str, path: str) -> None:
    """Refuse a URL whose ``path`` (after its bucket) has a ``.`` or ``..`` segment: an
    object store's keys are names, nothing resolves it, and obstore cannot name such a
    key (it said only "Could not parse path", naming the store's part of the URL)."""
    dots = [seg for seg in path.split("/") if seg in (".", "..")]
    if dots:
        head = url[: len(url) - len(path)]
        # Resolved from the bucket's root: a '..' past it is dropped there ("../x" read
        # "If you meant 's3://b/../x'", and "d/.." "'s3://b/.'": refused again).
        meant = posixpath.normpath("/" + path).lstrip("/")
        raise ConfigError(
            f"{url}: has a {dots[0]!r} path segment; an object store's keys are names, not "
            "paths, so nothing resolves it, and obstore cannot name a key holding one. If "
            f"you meant {head + meant!r}, write that"
        )


def check_key(url: str, key: str) -> None:
    """Refuse a key that obstore would read as another object's (:func:`empty_segment`)."""
    if empty_segment(key):
        raise empty_segment_error(f"{url}/{key}", key)


def unlistable(where: str, exc: Exception) -> StorageError:
    """A listing that met a key obstore cannot name: an empty path segment (``d//x.bin``),
    a ``.`` or ``..`` segment, or a control character.

    obstore ends the whole listing there, so no prefix above such a key lists at
    all; the message names the key, what is wrong with it and how to get past it.
    """
    text = str(exc)
    # To the '"' obstore's words go on from: a key with a '"' in it was named up to it.
    found = re.search(r'Path "(.*?)"(?= contained |: )', text) or re.search(r'Path "(.*?)"', text)
    key = repr(found.group(1)) if found else "a key"
    sequence = re.search(r'illegal character sequence "(.*?)"', text)
    if "empty path segment" in text:
        why = "an empty path segment: '//', or a '/' at its start or end"
    elif sequence is not None and sequence.group(1) in (".", ".."):
        why = f"a path segment {sequence.group(1)!r}"
    else:
        why = "a character obstore refuses in a path (a control character)"
    return StorageError(
        f"{where}: the listing holds {key}, a name obstore cannot hold ({why}), so it can "
        "neither list past it nor read it: no prefix above it can be listed. Move that "
        "object to a name without it (e.g. aws s3 mv 's3://bucket/d//x.bin' "
        f"'s3://bucket/d/x.bin'), or list a prefix that does not hold it ({summarize(exc)})"
    )


def named_once(where: str, listed: list[tuple[str, ObjectInfo]]) -> list[tuple[str, ObjectInfo]]:
    """``listed`` (sorted), refused if two objects with bytes came back under one name.

    obstore drops a '/' at the start or end of a listed key: ``/d/x.bin`` and
    ``d/x.bin/`` are listed as ``d/x.bin``. Beside a real ``d/x.bin`` that is one
    name for two objects (one of them read in place of the other, then refused as
    "changed since it was listed"). An empty one beside it is a folder marker
    (``d/`` beside an object ``d``) and goes, as ``drop_folder_markers`` drops markers.
    """
    keys = list(map(item_key, listed))
    if not any(map(operator.eq, keys, itertools.islice(keys, 1, None))):
        return listed  # every name once: most listings (neighbours compared in C, no set)
    out: list[tuple[str, ObjectInfo]] = []
    for key, info in listed:
        if not out or out[-1][0] != key:
            out.append((key, info))
            continue
        other = out[-1][1]
        if info.size and other.size:
            raise StorageError(
                f"{where}: the listing holds two objects under the name {key!r} "
                f"({other.size} and {info.size} bytes): one of them is named with a '/' "
                f"at its start or end ('/{key}' or '{key}/'), which obstore drops, so it "
                "cannot be told from the other nor read. Move it to a name without that '/' "
                "(e.g. aws s3 mv 's3://bucket//d/x.bin' 's3://bucket/d/y.bin'), or list a "
                "prefix that does not hold it"
            )
        if info.size:
            out[-1] = (key, info)
    return out
