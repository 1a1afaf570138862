"""Which paths are mount points right now, read from /proc/self/mounts."""

from __future__ import annotations

import os
import re

__all__ = ["is_mounted", "mount_points"]

_MOUNTS = "/proc/self/mounts"
# The kernel writes space, tab, newline and backslash in paths as octal escapes.
_ESCAPE = re.compile(r"\\([0-7]{3})")


def mount_points(mounts_file: str = _MOUNTS) -> set[str]:
    """Every mount point listed in ``mounts_file``, unescaped."""
    try:
        with open(mounts_file, encoding="utf-8", errors="surrogateescape") as fh:
            lines = fh.read().splitlines()
    except FileNotFoundError:
        return set()
    points = set()
    for line in lines:
        fields = line.split(" ")
        if len(fields) >= 2:
            points.add(_ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), fields[1]))
    return points


def is_mounted(path: str | os.PathLike[str], mounts_file: str = _MOUNTS) -> bool:
    """Whether ``path`` is a mount point now.

    Reads the mount table instead of stat-ing ``path``: a stat of a FUSE mount
    whose server hung would hang too. For the same reason only the parent's
    symlinks are resolved, never ``path`` itself.
    """
    absolute = os.path.abspath(os.fspath(path))
    parent, name = os.path.split(absolute)
    resolved = os.path.join(os.path.realpath(parent), name) if name else absolute
    return resolved in mount_points(mounts_file)
