"""Globs over object keys with the meaning ``glob.glob(pattern, recursive=True)`` gives
them over files, so that one pattern picks the same files locally and on object storage.

Object stores have no folders, only keys with ``/`` in them, and ``fnmatch`` lets ``*``
match across ``/``; matched part by part instead, ``s3://b/t/year=*/*.parquet`` reads
``year=2024/part-0.parquet`` but not ``year=2024/month=01/part-0.parquet``. As in
``glob``: ``**`` (a whole part) matches any number of folders, and a wildcard does not
match a name that starts with ``.`` (Spark's ``.part-00000.parquet.crc``) unless the
pattern's part does.

A name that holds ``*``, ``?`` or ``[`` itself (``shard[01].npy``, ``imgs/a?.jpg``,
``d[1]/*.npy``) is read as written where it exists: :func:`literal_parts` escapes each
such part, from the left, while the file, folder or object it names exists, and stops
at the first that does not (a wildcard from there). Read as a pattern, ``shard[01].npy``
picked ``shard0.npy`` and ``shard1.npy`` instead, and ``d[1]/*.npy`` the files of
``d1/``: other data, without a word. A part past the first wildcard is a pattern; to
name such a character there, escape it as :func:`glob.escape` does (``[[]``, ``[*]``,
``[?]``), which :data:`ESCAPE_HINT` tells a pattern that matched nothing.
"""

from __future__ import annotations

import bisect
import fnmatch
import os
import re
from collections.abc import Callable, Sequence

from headrace.errors import ObjectNotFoundError

__all__ = [
    "ESCAPE_HINT",
    "glob_root",
    "has_magic",
    "http_literal",
    "key_matches",
    "listed_exists",
    "literal_parts",
    "local_pattern",
]

_MAGIC = "*?["

#: What a pattern that matched nothing adds, for a name with a wildcard character in it.
ESCAPE_HINT = (
    "; a name with '*', '?' or '[' in it is read as written where it exists (a file, folder "
    "or object of that name); past a wildcard, write such a character as '[*]', '[?]' or "
    "'[[]' (glob.escape)"
)


def has_magic(pattern: str) -> bool:
    return any(c in pattern for c in _MAGIC)


def http_literal(url: str, exists: Callable[[str], bool] | None = None) -> bool:
    """Whether ``url`` is an http(s) URL with a wildcard character in its path that names
    an object as written (``exists(url)``; ``None``: never); an http(s) glob that does
    not is refused here, for every source: a web server cannot list, so a pattern there
    cannot be expanded, and ``http://host/shard-*.parquet`` was asked for as an object
    of that name: "no such object shard-*.parquet", or a listing the server refused."""
    scheme, _, rest = url.partition("://")
    path = rest.partition("/")[2].partition("?")[0]  # ('?' starts an http URL's query)
    if scheme.lower() not in ("http", "https") or not has_magic(path):
        return False
    if exists is not None and exists(url):
        return True
    none = " (and there is no object of that name)" if exists is not None else ""
    raise ObjectNotFoundError(
        f"{url}: a glob pattern cannot be expanded over http(s): a web server cannot list "
        f"its files{none}; pass the list of URLs, e.g. "
        "[f'http://host/shard-{i:05d}.parquet' for i in range(n)], or read the bucket "
        "through its own scheme (s3://, gs://, az://), which can list"
    )


def glob_root(pattern: str, sep: str = "/") -> str:
    """The folder (or prefix) above the first part of ``pattern`` that holds a wildcard."""
    parts = pattern.split(sep)
    first = next(i for i, p in enumerate(parts) if has_magic(p))
    return sep.join(parts[:first])


def literal_parts(pattern: str, exists: Callable[[str], bool], sep: str = "/") -> tuple[str, bool]:
    """``pattern`` with each part holding a wildcard character escaped, from the left,
    while ``exists(path)`` says the path up to and including it exists as written; and
    whether every such part did (then ``pattern`` names one path, to read as written).
    ``exists`` is asked once for each such part up to the first that does not exist."""
    given = pattern.split(sep)
    parts = list(given)
    for i, part in enumerate(given):
        if not has_magic(part):
            continue
        if not exists(sep.join(given[: i + 1])):  # the names as written, none escaped
            return sep.join(parts), False
        parts[i] = re.sub(r"([*?[])", r"[\1]", part)
    return sep.join(parts), True


def local_pattern(path: str) -> str | None:
    """A local ``path`` as a glob pattern, its parts that exist as written escaped
    (:func:`literal_parts`: ``d[1]/*.npy`` reads ``d[1]/``, not ``d1/``); ``None`` when it
    is no pattern, or names an existing path (a folder named ``odd[1]`` is a folder)."""
    if not has_magic(path):
        return None
    pattern, literal = literal_parts(path, os.path.lexists, os.sep)
    return None if literal else pattern


def listed_exists(urls: Sequence[str]) -> Callable[[str], bool]:
    """``exists(url)`` for :func:`literal_parts` over a listing's sorted ``urls``: an
    object of that name, or a "folder" (objects under ``url + "/"``)."""

    def exists(url: str) -> bool:
        for want, whole in ((url, True), (url + "/", False)):
            i = bisect.bisect_left(urls, want)
            if i < len(urls) and (urls[i] == want if whole else urls[i].startswith(want)):
                return True
        return False

    return exists


def key_matches(key: str, pattern: str) -> bool:
    """Whether ``key`` (relative to :func:`glob_root`, ``/``-separated) matches
    ``pattern`` (relative to the same root)."""
    return _match(key.split("/"), pattern.split("/"))


def _match(names: list[str], parts: list[str]) -> bool:
    if not parts:
        return not names
    part, rest = parts[0], parts[1:]
    if part == "**":
        # Folders only, unless it ends the pattern (then the file too).
        most = len(names) if not rest else len(names) - 1
        for k in range(max(most, 0) + 1):
            if k and names[k - 1].startswith("."):
                return False
            if _match(names[k:], rest) and (rest or k):
                return True
        return False
    if not names:
        return False
    name = names[0]
    if has_magic(part):
        if name.startswith(".") and not part.startswith("."):
            return False
        if not fnmatch.fnmatchcase(name, part):
            return False
    elif name != part:
        return False
    return _match(names[1:], rest)
