"""How much memory this process may still take: the host's, or its container's.

``MemAvailable`` is the host's figure: in a container limited to 4 GiB on a
128 GiB host it says 128, and a read-ahead sized by it is killed by the kernel
at 4. So the cgroup's room counts too, the smaller one wins, and the answer
says which bound it (a warning names the limit to raise).

cgroup v2: ``memory.max`` and ``memory.current``; v1: ``memory.limit_in_bytes``
and ``memory.usage_in_bytes``; both of the process's cgroup (``/proc/self/cgroup``)
and of every ancestor up to the mount, since a parent's limit binds its children.
Usage counts the page cache, which the kernel reclaims before it kills, so the
inactive file pages of ``memory.stat`` are taken off it, as ``MemAvailable``
counts them free on the host (the "working set" of docker stats and the kubelet).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

__all__ = ["CGROUP_ROOT", "Memory", "available_memory"]

#: where cgroup file systems are mounted (module-level: tests point it at a tree)
CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")
MEMINFO = Path("/proc/meminfo")

#: a limit at or above this is none: v1 writes "no limit" as 2^63 rounded to pages
NO_LIMIT = 1 << 60

_V2 = ("memory.max", "memory.current", "inactive_file")
_V1 = ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")


@dataclass(frozen=True, kw_only=True, slots=True)
class Memory:
    #: bytes this process may still take: the smaller of the two below
    available: int
    #: which one bound it: ``"host"`` (MemAvailable) or ``"container"`` (a cgroup limit)
    bound: Literal["host", "container"]
    #: the host's MemAvailable, None where it is unknown
    host: int | None
    #: the binding cgroup's limit file, limit and (reclaimable cache taken off) usage,
    #: where a cgroup limits memory
    limit_file: str | None = None
    limit: int | None = None
    in_use: int | None = None

    def which(self) -> str:
        """The bound, in words: ``"the host's MemAvailable"``, or the container's limit
        file and figures (what to raise)."""
        if self.bound == "host":
            return "the host's MemAvailable"
        return (
            f"the container's limit: {self.limit_file} = {self.limit:,} bytes, "
            f"{self.in_use:,} of them in use"
        )


def _host_available() -> int | None:
    try:
        with MEMINFO.open("rb") as f:
            for line in f:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _number(path: Path) -> int | None:
    """The integer in ``path``; None where it is missing, ``max`` or not a number."""
    try:
        text = path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None
    try:
        return int(text)
    except ValueError:  # "max" (v2: no limit), or garbage
        return None


def _stat(path: Path, key: str) -> int:
    """``key``'s value in a ``memory.stat`` file (0 where it is missing or unreadable)."""
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return 0
    for line in lines:
        name, _, value = line.partition(" ")
        if name == key:
            try:
                return max(0, int(value))
            except ValueError:
                return 0
    return 0


def _cgroup_dirs() -> tuple[list[Path], tuple[str, str, str]] | None:
    """The memory cgroup's folders, the process's own first then its ancestors up to
    the mount, and the names of its files; None where there is no cgroup to read.
    A v1 memory line wins over the v2 one (a hybrid host mounts memory on v1)."""
    try:
        lines = PROC_CGROUP.read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    v1 = v2 = None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if "memory" in parts[1].split(","):
            v1 = parts[2]
        elif parts[0] == "0" and parts[1] == "":
            v2 = parts[2]
    if v1 is not None:
        base, own, names = CGROUP_ROOT / "memory", v1, _V1
    elif v2 is not None:
        base, own, names = CGROUP_ROOT, v2, _V2
    else:
        return None
    here = base / own.lstrip("/")
    # In a cgroup namespace, or a container shown its host's path, the process's
    # cgroup is the mount itself.
    if not here.is_dir() or ".." in Path(own).parts:
        here = base
    dirs = [here]
    while dirs[-1] != base and base in dirs[-1].parents:
        dirs.append(dirs[-1].parent)
    return dirs, names


def _cgroup_room() -> tuple[int, str, int, int] | None:
    """(room, limit file, limit, usage) of the tightest cgroup limit, None where no
    cgroup limits memory."""
    found = _cgroup_dirs()
    if found is None:
        return None
    dirs, (limit_name, usage_name, inactive_key) = found
    best: tuple[int, str, int, int] | None = None
    for d in dirs:
        limit = _number(d / limit_name)
        if limit is None or limit <= 0 or limit >= NO_LIMIT:
            continue
        usage = _number(d / usage_name)
        if usage is None:  # a limit without its usage: the limit is the room
            usage = 0
        usage = max(0, usage - _stat(d / "memory.stat", inactive_key))
        room = max(0, limit - usage)
        if best is None or room < best[0]:
            best = (room, str(d / limit_name), limit, usage)
    return best


def available_memory() -> Memory | None:
    """The memory this process may still take (see the module's docstring); None
    where neither the host nor a cgroup says (not Linux)."""
    host = _host_available()
    cgroup = _cgroup_room()
    if cgroup is not None and (host is None or cgroup[0] < host):
        room, path, limit, usage = cgroup
        return Memory(
            available=room, bound="container", host=host, limit_file=path, limit=limit, in_use=usage
        )
    if host is None:
        return None
    return Memory(available=host, bound="host", host=host)
