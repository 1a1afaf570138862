"""The machine a report was measured on, and process/memory gauges.

Units: bytes everywhere in JSON; "GB" is 10^9 bytes, "GiB" 2^30.
"""

from __future__ import annotations

import multiprocessing
import os
import platform
import resource
import sys
from importlib import metadata
from typing import Any

from headrace.io import usable_cpus
from headrace.io._memory import available_memory
from headrace.io._mounts import mount_of, network_type

__all__ = [
    "cpu_seconds",
    "machine_info",
    "meminfo",
    "peak_rss_bytes",
    "storage_type",
]

_LIBRARIES = ("numpy", "headrace", "pyarrow", "h5py", "obstore", "simplejpeg", "pillow", "rich")


def meminfo() -> dict[str, int]:
    """``/proc/meminfo`` in bytes (empty where there is none)."""
    out: dict[str, int] = {}
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                key, _, rest = line.partition(":")
                parts = rest.split()
                if parts:
                    out[key] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    except OSError:
        pass
    return out


def peak_rss_bytes() -> int:
    """This process's peak resident set size so far.

    Linux: ``VmHWM`` of ``/proc/self/status``, the high-water mark of this
    address space. (``ru_maxrss`` is not used there: it survives ``exec``, so a
    child would report its parent's peak at ``fork``.)
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) * (1 if sys.platform == "darwin" else 1024)


def cpu_seconds() -> float:
    """User plus system CPU time of this process, all threads."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def storage_type(path: str) -> dict[str, Any]:
    """Filesystem type and device of the mount holding ``path`` (from /proc/mounts), and
    whether it is a network (or FUSE) file system."""
    m = mount_of(path)
    if m is None:
        return {"device": "", "mount": "", "fstype": "", "network": False}
    return {
        "device": m.device,
        "mount": m.mount,
        "fstype": m.fstype,
        "network": network_type(m.fstype),
    }


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_info(data_path: str | None = None) -> dict[str, Any]:
    """CPU, cores, memory (and a container's limit), Python and library versions, storage
    of ``data_path``."""
    versions: dict[str, str] = {}
    for lib in _LIBRARIES:
        try:
            versions[lib] = metadata.version(lib)
        except metadata.PackageNotFoundError:
            continue
    mem = meminfo()
    # A container's memory limit where it binds below the host's available memory (None:
    # none does): a 4 GiB pod on a 128 GiB host was a 128 GB machine.
    room = available_memory()
    limit = room.limit if room is not None and room.bound == "container" else None
    try:
        load: list[float] | None = list(os.getloadavg())
    except OSError:  # no /proc/loadavg (a sandbox): taken after the run, it lost the report
        load = None
    return {
        "cpu_model": _cpu_model(),
        "cores": os.cpu_count() or 1,
        "cores_usable": usable_cpus(),  # affinity and a container's CPU quota
        "load_average": load,
        "memory_bytes": mem.get("MemTotal", 0),  # the host's, in a container too
        "memory_limit_bytes": limit,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "libraries": versions,
        "start_method": multiprocessing.get_start_method(allow_none=True) or "default",
        "storage": storage_type(data_path) if data_path else None,
    }
