"""A :class:`~headrace.formats.TokenSource`'s folders and glob patterns, as the files they name.

A local folder stands for its ``.bin`` files (not those in subfolders: a glob such as
``data/**/*.bin`` reads them), a local glob pattern for the files it matches, an
object-store glob (``s3://bucket/data/*.bin``, matched part by part as ``glob.glob``
matches files: :mod:`headrace.formats._url_glob`) for the objects it matches, and an
object-store prefix ending in ``/`` for the ``.bin`` objects right under it. Each
expands, sorted, in place of the item: the source is then the one the sorted list
gives (same fingerprint, same batches). Sidecars (``.json``) and Megatron indexes
(``.idx``) a pattern matches are not shards and are left out: their shard finds them.

A folder or prefix whose shards' names say several splits (nanoGPT's ``train.bin``
and ``val.bin``; modded-nanogpt's ``fineweb_train_000001.bin`` beside
``fineweb_val_000000.bin``) is refused, naming a glob for one: read as one, it would
train on the validation split without a word. A glob names what it wants: taken as is.
A name holding ``*?[`` that exists is that name, part by part from the left
(:func:`~headrace.formats._url_glob.literal_parts`): ``s3://b/shard[01].bin`` is that object.

Matches are checked as FileSource and TableSource check theirs: a dangling symbolic
link is refused naming its target, a FIFO, socket or device by name (opening a FIFO
waits for a writer for ever), and a ``**`` pattern through a symbolic link to a folder
above it by the link (``glob`` follows it until the path is too deep, matching each shard
under it over and over). A folder or pattern that matches no shard is refused, naming it
(and, for a folder, what it holds instead).
"""

from __future__ import annotations

import glob
import os
import re
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TypeVar

from headrace.errors import ConfigError, ObjectNotFoundError
from headrace.formats._file_list import is_object_url
from headrace.formats._file_walk import (
    refuse_empty,
    refuse_glob_cycles,
    regular_stats,
    suffixes,
)
from headrace.formats._object_files import ObjectFiles, refuse_bucketless
from headrace.formats._url_glob import (
    ESCAPE_HINT,
    glob_root,
    has_magic,
    http_literal,
    key_matches,
    listed_exists,
    literal_parts,
)
from headrace.io import _in_flight as in_flight
from headrace.io._file import url_typo

__all__ = ["SIDECARS", "expand_token_paths"]

#: What a pattern may match beside shards that is not one: a raw shard's dtype sidecar
#: (``x.bin.json``) and a Megatron shard's index (``x.idx``).
SIDECARS = (".json", ".idx")

T = TypeVar("T")


def expand_token_paths(
    files: Sequence[str | os.PathLike[str] | T], stores: Callable[[], ObjectFiles]
) -> list[str | os.PathLike[str] | T]:
    """``files`` with each folder, prefix (``.../``) and glob pattern replaced by the
    shards it names, sorted; other items (files, URLs, opened files) as given.
    ``stores()`` lists object-store patterns and prefixes."""
    refuse_empty(files, "TokenSource")
    out: list[str | os.PathLike[str] | T] = []
    for f in files:
        if not isinstance(f, (str, os.PathLike)):
            out.append(f)
            continue
        text = os.fspath(f)
        if is_object_url(text):
            refuse_bucketless(text)
            if text.endswith("/"):  # a prefix: the shards right under it
                out.extend(_remote_matches(text + "*.bin", stores(), folder=text))
            elif http_literal(text, lambda u: _exists(stores(), u)):
                out.append(f)  # (an http(s) glob is refused there: a server cannot list)
            elif has_magic(_url_path(text)):
                out.extend(_remote_matches(text, stores()))
            else:
                out.append(f)
        elif os.path.isdir(text):
            out.extend(_local_matches(os.path.join(glob.escape(text), "*.bin"), folder=text))
        elif has_magic(text) and not os.path.lexists(text):  # (a file named x[1].bin is one)
            out.extend(_local_matches(text))
        else:
            out.append(f)
    return out


def _exists(stores: ObjectFiles, url: str) -> bool:
    try:
        stores.info(url)
    except ObjectNotFoundError:
        return False
    return True


def _url_path(url: str) -> str:
    """What of ``url`` may hold a pattern: an http(s) URL's ``?`` starts its query."""
    path = url.partition("://")[2]
    return path.partition("?")[0] if url.startswith(("http://", "https://")) else path


# A name's word (between ``_``, ``-``, ``.``, digits) -> the split it says.
_SPLITS = {
    "train": "train", "training": "train",
    "val": "validation", "valid": "validation", "validation": "validation",
    "dev": "validation", "eval": "validation", "evaluation": "validation",
    "test": "test", "testing": "test",
}  # fmt: skip


def _split_word(name: str) -> str | None:
    """The one split word in a shard's name (``None``: none, or more than one)."""
    words = {w for w in re.split(r"[^a-z]+", name.lower()) if w in _SPLITS}
    return words.pop() if len(words) == 1 else None


def _refuse_splits(folder: str, found: list[str], sep: str) -> None:
    """Refuse a folder's or prefix's shards (``found``) whose names say two splits or more."""
    by_split: dict[str, str] = {}  # split -> the first shard's name that says it
    for path in found:
        name = path.rsplit(sep, 1)[-1]
        word = _split_word(name)
        if word is not None:
            by_split.setdefault(_SPLITS[word], name)
    if len(by_split) < 2:
        return
    first = by_split.get("train") or next(iter(by_split.values()))
    word = _split_word(first)
    shown = ", ".join(f"{split}: {name}" for split, name in by_split.items())
    base = folder.rstrip(sep)
    raise ConfigError(
        f"{folder}: its .bin token files are of several splits ({shown}, ...): read as "
        f"one source, training would read the held-out split too. Pass a glob for one, "
        f"e.g. {base + sep + '*' + str(word) + '*.bin'!r}, or a list of the files"
    )


def _local_matches(pattern: str, folder: str | None = None) -> list[str]:
    # A part that exists as written is that folder (d[1]/*.bin: not d1/'s shards).
    escaped = pattern if folder is not None else literal_parts(pattern, os.path.lexists, os.sep)[0]
    with in_flight.Waiting("list", escaped):
        matches = sorted(f for f in glob.glob(escaped, recursive=True) if not f.endswith(SIDECARS))
    if "**" in escaped:  # through a link to a folder above it: each shard many times
        refuse_glob_cycles(pattern, matches)
    # A folder named like a shard is not one; a FIFO or dangling link is, and is refused
    # by name. Stat-ed many at a time once slow (a network mount's round trip each).
    found = [f for f, _ in regular_stats(matches, set(matches))]
    if not found:
        if folder is not None:
            held = suffixes(
                e.name for e in os.scandir(folder) if not e.name.startswith(".") and e.is_file()
            )
            raise ObjectNotFoundError(
                f"{folder}: a folder with no .bin token files right in it"
                + (f" (it holds {_held(held)})" if held else " (it is empty)")
                + f"; a folder stands for its .bin files: pass a glob pattern such as "
                f"{os.path.join(folder, '**', '*.bin')!r} for shards in subfolders or of "
                "another name, or a list of the token files"
            )
        meant = url_typo(pattern)  # s3:/b/*.bin: an object URL as pathlib.Path writes it
        if meant is not None and "://" not in pattern:
            raise ObjectNotFoundError(
                f"{pattern}: no token files match this glob pattern, read as a local path: "
                f"did you mean {meant!r}? (pathlib.Path makes '://' ':/': pass URLs as str)"
            )
        raise ObjectNotFoundError(
            f"{pattern}: no token files match this glob pattern (.json sidecars and .idx "
            "indexes are not counted); pass a pattern that matches the shards, or a list "
            "of them" + ESCAPE_HINT
        )
    if folder is not None:
        _refuse_splits(folder, found, os.sep)
    return found


def _remote_matches(pattern: str, stores: ObjectFiles, folder: str | None = None) -> list[str]:
    # A prefix is the one written (s3://b/d[1]/ lists d[1]/, not the bucket for d1/).
    base = folder.rstrip("/") if folder is not None else glob_root(pattern)
    wanted = pattern[len(base) + 1 :]
    every = stores.listing(base)
    if folder is None:
        # Parts that name an object or prefix as written are that name: shard[01].bin
        # is the object of that name, not shard0.bin and shard1.bin.
        urls = sorted(u for u, _ in every)
        escaped, literal = literal_parts(pattern, listed_exists(urls))
        if literal:
            return [pattern]
        wanted = escaped[len(base) + 1 :]
    found = sorted(
        u for u, _ in every if key_matches(u[len(base) + 1 :], wanted) and not u.endswith(SIDECARS)
    )
    if not found:
        keys = [u[len(base) + 1 :] for u, _ in every]
        if folder is not None:
            here = suffixes(k for k in keys if "/" not in k and not k.startswith("."))
            raise ObjectNotFoundError(
                f"{folder}: a prefix with no .bin token objects right under it"
                + (
                    f" (it holds {_held(here)})"
                    if here
                    else ""
                    if keys
                    else _nothing(folder, stores)
                )
                + f"; a prefix ending in '/' stands for its .bin objects: pass a glob "
                f"pattern such as {folder + '**/*.bin'!r} for shards below it or of another "
                "name, or a list of the token files' URLs"
            )
        raise ObjectNotFoundError(
            f"{pattern}: no objects match this glob pattern ({len(keys):,} listed under "
            f"{base}/; .json sidecars and .idx indexes are not counted); pass a pattern "
            "that matches the shards, or a list of their URLs" + ESCAPE_HINT
        )
    if folder is not None:
        _refuse_splits(folder, found, "/")
    return found


def _nothing(prefix: str, stores: ObjectFiles) -> str:
    """`` (no objects; did you mean 's3://b/data/'?)``: an empty prefix, likely misspelt;
    or an object's URL with a '/' added (whose suggestion was itself)."""
    close = stores.closest_beside(prefix)
    if close == prefix.rstrip("/"):
        return f" (no objects; {close!r} is an object: leave out the '/' to read it)"
    return " (no objects" + (f"; did you mean {close + '/'!r}?)" if close else ")")


def _held(held: Counter[str]) -> str:
    shown = ", ".join(f"{n:,} {e or '(no extension)'}" for e, n in held.most_common(3))
    return shown + (", ..." if len(held) > 3 else "")
