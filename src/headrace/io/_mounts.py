"""Which mount holds a path, and whether it is a network file system.

A read on a network mount (NFS, SMB, Lustre, a FUSE file system over object
storage...) is a round trip: throughput comes from how many are in flight,
as on object storage, and readers pick deeper queues there than on a local
disk, whose queue a few reads already fill.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable
from typing import NamedTuple

from headrace.errors import ConfigError

__all__ = [
    "MEMORY_FS",
    "Mount",
    "any_on_network_fs",
    "is_network_fs",
    "mount_of",
    "network_mount_of",
    "network_type",
    "on_network_fs",
    "stale_mount_of",
]

#: File systems whose files are pages in memory: no device under them, and O_DIRECT
#: (taken by tmpfs since Linux 6.6) reads memory too.
MEMORY_FS = frozenset({"tmpfs", "ramfs"})

# Kernel file systems whose reads cross a network. FUSE ones are matched by
# prefix ("fuse", "fuse.s3fs", "fuse.juicefs", "fuse.gcsfuse"...), except fuseblk:
# NTFS or exFAT on a local block device.
_NETWORK = frozenset(
    {
        "9p",
        "afs",
        "beegfs",
        "ceph",
        "cifs",
        "gfs2",
        "glusterfs",
        "gpfs",
        "lustre",
        "ncpfs",
        "nfs",
        "nfs4",
        "ocfs2",
        "orangefs",
        "panfs",
        "pvfs2",
        "smb3",
        "smbfs",
        "virtiofs",
        "wekafs",
    }
)


_OCTAL = re.compile(r"\\([0-7]{3})")


def _unescape(m: re.Match[str]) -> str:
    return chr(int(m.group(1), 8))


class Mount(NamedTuple):
    device: str
    mount: str
    fstype: str


def _mounts() -> list[Mount] | None:
    """Every mount in ``/proc/mounts``; None where that cannot be read (not Linux)."""
    try:
        # Undecodable bytes as os.fsdecode gives them, so that realpath's string matches.
        with open("/proc/mounts", encoding="utf-8", errors="surrogateescape") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    out = []
    for line in lines:
        fields = line.split()
        if len(fields) < 3:
            continue
        # Spaces, tabs, newlines and backslashes in names are written as octal escapes
        # (\040, \011, \012, \134); every other byte is the name's own (UTF-8 of a
        # non-ASCII name: not to be read as escapes, which took it for Latin-1).
        out.append(Mount(*(_OCTAL.sub(_unescape, p) for p in fields[:3])))
    return out


def _holder(real: str, mounts: list[Mount]) -> Mount | None:
    best: Mount | None = None
    for m in mounts:
        inside = real == m.mount or real.startswith(m.mount.rstrip("/") + "/")
        if inside and (best is None or len(m.mount) >= len(best.mount)):
            best = m  # the deepest (a later one covers earlier)
    return best


def mount_of(path: str | os.PathLike[str]) -> Mount | None:
    """The mount holding ``path`` (its real path), from ``/proc/mounts``; None
    where that cannot be read (not Linux)."""
    mounts = _mounts()
    return None if mounts is None else _holder(os.path.realpath(path), mounts)


def network_mount_of(path: str | os.PathLike[str]) -> Mount | None:
    """The network (or FUSE) mount holding ``path`` now, or None. A mount detached under
    an open file (its FUSE server stopped: Ctrl-C, SIGTERM; ``fusermount3 -uz``) is in
    no table any more, and the deepest mount holding the path is then the one beneath
    it, often "/": a message naming the mount to unmount named that one."""
    m = mount_of(path)
    return m if m is not None and network_type(m.fstype) else None


def stale_mount_of(path: str | os.PathLike[str]) -> Mount | None:
    """The mount a read of ``path`` that answered ENOTCONN went through: a network or
    FUSE one (``fuseblk`` too, NTFS through ntfs-3g), or None where it is detached
    already (see :func:`network_mount_of`: never the local mount beneath it)."""
    m = mount_of(path)
    return m if m is not None and (network_type(m.fstype) or m.fstype == "fuseblk") else None


def network_type(fstype: str) -> bool:
    """Whether a file system of type ``fstype`` (as ``/proc/mounts`` names it) is a
    network (or FUSE) one."""
    return fstype in _NETWORK or (fstype.startswith("fuse") and fstype != "fuseblk")


def is_network_fs(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` lies on a network (or FUSE) file system."""
    m = mount_of(path)
    return m is not None and network_type(m.fstype)


def any_on_network_fs(paths: Iterable[str]) -> bool:
    """Whether any of ``paths`` lies on a network (or FUSE) file system."""
    return network_mount(paths) is not None


def network_mount(paths: Iterable[str]) -> Mount | None:
    """The network (or FUSE) mount the first of ``paths`` on one lies on, or None.

    One read of ``/proc/mounts``, one pass over the names (0.2 s for a million)
    and one ``realpath`` for the first file of each folder; with no network
    mount on the machine (the common case), only the read.
    """
    mounts = _mounts()
    if not mounts or not any(network_type(m.fstype) for m in mounts):
        return None
    first: dict[str, str] = {}
    for p in paths:
        first.setdefault(p.rpartition("/")[0], p)  # 6x faster than os.path.dirname
    for p in first.values():
        m = _holder(os.path.realpath(p), mounts)
        if m is not None and network_type(m.fstype):
            return m
    return None


def local_cache_refused(what: str, paths: Iterable[str | os.PathLike[str]]) -> ConfigError:
    """Why ``cache_dir`` is refused for local ``paths`` (``what`` names them): it keeps
    copies of what an object store sent. On a network or FUSE mount, where a scientist
    would want one, it says what to do instead (not that they are "on local disk")."""
    head = f"cache_dir keeps local copies of what is read from an object store; {what}"
    m = network_mount(os.fspath(p) for p in paths)
    if m is None:
        return ConfigError(f"{head} is on local disk already (leave cache_dir out)")
    return ConfigError(
        f"{head} is on a {m.fstype} mount ({m.mount}): a file system, not an object store, "
        "so cache_dir cannot keep its reads; copy the files to local disk and read them "
        "there, or read the object store behind the mount (an s3:// URL) with cache_dir"
    )


def on_network_fs(path: str | os.PathLike[str]) -> bool:
    """Whether the file ``path`` lies on a network or FUSE mount, asked once per folder
    and process: ``/proc/mounts`` is parsed each time (70 us with 20 mounts here, more
    on a node with hundreds), and a table may have thousands of shards in a few
    folders. (A mount made over a folder already asked about is not seen.) The folder
    is the file's real one: a link from a local folder into a network mount (a folder
    of links into a share, a Hugging Face snapshot's files) lies on that mount."""
    return _network_folder(os.path.dirname(os.path.realpath(path)))


@functools.lru_cache(maxsize=256)
def _network_folder(folder: str) -> bool:
    return is_network_fs(folder)
