"""Which paths are mount points right now, read from /proc/self/mounts."""

from __future__ import annotations

import errno
import os
import re

from headrace.errors import ConfigError

__all__ = ["gone_mount", "is_mounted", "mount_points", "not_a_folder"]

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


def gone_mount(path: str | os.PathLike[str], mounts_file: str = _MOUNTS) -> str | None:
    """The mount point at or above ``path`` when a stat of ``path`` answers ENOTCONN, else
    ``None``. A FUSE server killed without unmounting leaves its mount behind, and every
    stat under it fails so; the fix is to unmount that mount point, which this names."""
    absolute = os.path.abspath(os.fspath(path))
    try:
        os.stat(absolute)
        return None
    except OSError as exc:
        if exc.errno != errno.ENOTCONN:
            return None
    points = mount_points(mounts_file)
    above = absolute
    while above not in points and os.path.dirname(above) != above:
        above = os.path.dirname(above)
    return above if above in points else absolute


def not_a_folder(what: str, path: str | os.PathLike[str], fix: str) -> ConfigError:
    """Why ``path`` (``what`` names it: "slowfs: source '/data'") is no folder to use.

    Under a mount whose server was killed (ENOTCONN) it said "is not a directory;
    create it first", and mkdir then said the folder exists.
    """
    gone = gone_mount(path)
    if gone is not None:
        return ConfigError(
            f"{what} is on a mount whose server is gone (Transport endpoint is not "
            "connected: a server killed without unmounting leaves its mount behind); "
            f"unmount it (`fusermount3 -u {gone}`, or `umount -l {gone}`) first."
        )
    return ConfigError(f"{what} is not a directory; {fix}")
