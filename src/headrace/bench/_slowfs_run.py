"""``headrace bench --storage slowfs``: the run reads ``--root`` through slowfs mounts.

Each variant gets a read-only slowfs mount of its own, in a private temporary
folder made for the run, and the storage ceiling one more. One mount for all
would let a variant ride its neighbour's pages: slowfs drops a file's cached
pages when the file is opened, never while it is open, and the timed trials
open every variant's stream first and then alternate them, so the second
variant's trial would read what the first one's had just fetched. Separate
mounts are separate inodes, with page caches of their own. Pages a variant
fetched itself stay cached for its later steps while its files are open, as
on a network mount with a client cache.

Every mount is taken down when the workload's run ends, also on an error,
Ctrl-C (the servers run in sessions of their own, so Ctrl-C reaches the bench
only, which then unmounts) or SIGTERM (which :func:`headrace.cli.main` unwinds as
Ctrl-C); if the bench is killed outright, each server's lifeline unmounts it, and only the
empty folder is left.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from typing import Any

from headrace._closing import Closing
from headrace.emulate import SlowFSConfig, SlowMount, check_fuse, is_mounted
from headrace.errors import ConfigError, HeadraceError

__all__ = ["FUSE_HELP", "VariantMounts", "fuse_check", "slowfs_figures"]

FUSE_HELP = (
    "install fuse3 (Debian/Ubuntu: apt-get install fuse3, which gives fusermount3) and "
    "mfusepy (pip install 'headrace[emulate]'); /dev/fuse must exist and open for "
    "reading and writing (in a container: --device /dev/fuse --cap-add SYS_ADMIN)"
)


def fuse_check() -> None:
    """Refuse ``--storage slowfs`` where FUSE cannot mount, saying what to install."""
    ok, why = check_fuse(probe_mount=False)
    if not ok:
        raise ConfigError(f"--storage slowfs needs FUSE, and {why}: {FUSE_HELP}")


class VariantMounts(Closing):
    """A slowfs mount of ``root`` per key (a variant's spec), made on first use.

    Mount points are numbered folders of a private temporary folder (mode 0700);
    :meth:`close` unmounts them all and removes the folder, never anything that is
    still mounted.
    """

    def __init__(self, root: str, config: SlowFSConfig) -> None:
        self.root = os.path.abspath(root)
        self.config = config
        self._dir: str | None = None
        self._mounts: dict[str, SlowMount] = {}
        #: each key's server counters, from its last snapshot (after :meth:`close`)
        self.final_stats: dict[str, dict[str, Any]] = {}

    def root_for(self, key: str) -> str:
        """The mount point that reads ``root`` for ``key``, mounted if it is not yet."""
        if key in self._mounts:
            return str(self._mounts[key].mnt)
        if self._dir is None:
            try:
                self._dir = tempfile.mkdtemp(prefix="headrace-bench-slowfs-")
            except OSError as exc:  # "No usable temporary directory found in [...]"
                raise ConfigError(
                    f"--storage slowfs mounts --root {self.root} on folders in a temporary "
                    f"folder, and none could be made ({exc}): set TMPDIR to a writable "
                    "folder on a local disk, e.g. mkdir -p $PWD/tmp && "
                    "TMPDIR=$PWD/tmp headrace bench ..."
                ) from exc
        mount = SlowMount(self.root, os.path.join(self._dir, str(len(self._mounts))), self.config)
        # Kept before it starts: start() unmounts after a failure of its own, and close()
        # stops whatever was started, so no path leaves a mount behind.
        self._mounts[key] = mount
        mount.start()
        return str(mount.mnt)

    def max_in_flight(self, key: str) -> int | None:
        """The most READs ``key``'s mount has had in flight at once so far (``None``: it
        has no mount, or its server gave no counters): how deep its reader read, in the
        unit every reader shares there, whatever its threads or queue depth."""
        mount = self._mounts.get(key)
        if mount is None:
            return None
        try:
            got = mount.stats().get("max_in_flight")
        except HeadraceError:
            return None
        return int(got) if got is not None else None

    @property
    def mount_points(self) -> list[str]:
        return [str(m.mnt) for m in self._mounts.values()]

    def close(self) -> None:
        """Unmount every mount (each, whatever the others do) and remove the folder."""
        errors: list[BaseException] = []
        for key, mount in self._mounts.items():
            try:
                mount.stop()
            except BaseException as exc:  # a second Ctrl-C: still stop the others
                errors.append(exc)
            if mount.final_stats is not None:
                self.final_stats[key] = mount.final_stats
        if self._dir is not None:
            for mount in self._mounts.values():
                if not is_mounted(mount.mnt):
                    with contextlib.suppress(OSError):
                        os.rmdir(mount.mnt)
            if not any(is_mounted(m.mnt) for m in self._mounts.values()):
                shutil.rmtree(self._dir, ignore_errors=True)
                self._dir = None
        self._mounts.clear()
        if errors:
            raise errors[0]


def slowfs_figures(stats: dict[str, Any] | None) -> dict[str, Any] | None:
    """What one variant's mount served, from its server's last counters."""
    if not stats:
        return None
    return {k: stats[k] for k in ("opens", "reads", "bytes_read", "max_in_flight") if k in stats}
