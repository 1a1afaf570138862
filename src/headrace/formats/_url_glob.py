"""Globs over object keys with the meaning ``glob.glob(pattern, recursive=True)`` gives
them over files, so that one pattern picks the same files locally and on object storage.

Object stores have no folders, only keys with ``/`` in them, and ``fnmatch`` lets ``*``
match across ``/``; matched part by part instead, ``s3://b/t/year=*/*.parquet`` reads
``year=2024/part-0.parquet`` but not ``year=2024/month=01/part-0.parquet``. As in
``glob``: ``**`` (a whole part) matches any number of folders, and a wildcard does not
match a name that starts with ``.`` (Spark's ``.part-00000.parquet.crc``) unless the
pattern's part does.
"""

from __future__ import annotations

import fnmatch

__all__ = ["glob_root", "has_magic", "key_matches"]

_MAGIC = "*?["


def has_magic(pattern: str) -> bool:
    return any(c in pattern for c in _MAGIC)


def glob_root(pattern: str, sep: str = "/") -> str:
    """The folder (or prefix) above the first part of ``pattern`` that holds a wildcard."""
    parts = pattern.split(sep)
    first = next(i for i, p in enumerate(parts) if has_magic(p))
    return sep.join(parts[:first])


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
