"""The process-wide pool of I/O threads.

Positional reads (``os.preadv``) release the GIL, so a handful of threads keep
many requests in flight without processes. One pool serves every reader in the
process, so opening more readers never multiplies threads. After ``fork`` the
child gets a fresh pool: the parent's threads do not exist there.

A second, deeper pool serves O_DIRECT and other high-queue-depth reads: NVMe
and network storage want 32 to 128 requests in flight, more than the 8 threads
that suit buffered reads. Its threads start only when a deep read needs them,
so an idle deep pool costs nothing. Their threads are
daemons (:mod:`._daemon_pool`): a read stuck in stalled storage never holds the exit.

A third pool reads and writes a local object cache's entries for range reads
(:class:`~headrace.io.ObjectCache`). Those reads are started by tasks that run
on the I/O pool and wait for them (a row window's read): on the I/O pool
itself they could queue behind their own waiting callers and never run.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import Executor

from headrace.errors import ConfigError
from headrace.io._daemon_pool import DaemonPool

__all__ = [
    "DEFAULT_DEEP_IO_THREADS",
    "DEFAULT_IO_THREADS",
    "SharedPool",
    "cache_pool",
    "deep_io_pool",
    "deep_io_threads",
    "io_pool",
    "io_threads",
    "set_deep_io_threads",
    "set_io_threads",
    "threads_from_env",
    "usable_cpus",
]

DEFAULT_IO_THREADS = 8
DEFAULT_DEEP_IO_THREADS = 64

_ALL: list[SharedPool] = []  # every shared pool, forgotten in a forked child


class SharedPool:
    """A process-wide executor, started on first use, resizable, reset after fork
    (every instance: a forked child makes its own threads on first use)."""

    def __init__(self, name: str, env: str, default: int) -> None:
        self.name = name
        self._env = env
        self._default = default
        # Read on first use, not at import: a bad value must be an error naming the
        # variable where a pool is needed, not an import of headrace that fails.
        self._threads: int | None = None
        self._lock = threading.Lock()
        self._pool: DaemonPool | None = None
        _ALL.append(self)

    @property
    def threads(self) -> int:
        n = self._threads
        if n is None:
            n = self._threads = threads_from_env(self._env, self._default)
        return n

    def get(self) -> DaemonPool:
        pool = self._pool
        if pool is None:
            with self._lock:
                if self._pool is None:
                    self._pool = DaemonPool(self.threads, thread_name_prefix=self.name)
                pool = self._pool
        return pool

    def resize(self, n: int) -> None:
        """Reads already submitted finish on the old executor.

        It is dropped, not shut down: a batch that took it before the resize still
        submits its reads there (shut down, that was "cannot schedule new futures
        after shutdown"); its threads end once the last such batch lets it go.
        """
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ConfigError(f"{self.name} threads must be a positive integer (got {n!r}).")
        with self._lock:
            self._pool, self._threads = None, n

    def forget(self) -> None:
        # After fork: the parent's worker threads were not copied; its executor would hang.
        # A new lock too: a parent thread inside get() or resize() at the fork left the
        # child's copy held, by a thread the child does not have.
        self._lock = threading.Lock()
        self._pool = None


def threads_from_env(env: str, default: int) -> int:
    """A thread count from the environment variable ``env``; unset or empty: ``default``."""
    value = os.environ.get(env, "")
    if not value.strip():
        return default
    try:
        n = int(value.strip())
    except ValueError:
        n = 0
    if n < 1:
        raise ConfigError(
            f"{env} must be a positive integer number of threads (got {value!r}); set it to "
            f"e.g. {default}, or unset it for the default ({default})."
        )
    return n


def usable_cpus() -> int:
    """The CPUs this process may use: its affinity (where the platform says), and no
    more than a cgroup CPU quota allows (a container limited to 2 CPUs on a 64-core
    host sees 64 in its affinity): cgroup v2's ``cpu.max`` at the root or of the
    process's own cgroup, or v1's ``cpu.cfs_quota_us`` (until 2026-12-07 v2's at the
    root alone: a v1 host's containers counted the host's cores)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    quotas = [_cgroup_cpus(_CPU_MAX), _cgroup_cpus(_own_cpu_max()), _cgroup_v1_cpus(_CPU_V1)]
    found = [q for q in quotas if q is not None]
    return max(1, min(cpus, *found)) if found else cpus


_CPU_MAX = "/sys/fs/cgroup/cpu.max"
#: cgroup v1's CPU controller, as a container sees its own
_CPU_V1 = "/sys/fs/cgroup/cpu"
_SELF_CGROUP = "/proc/self/cgroup"


def _own_cpu_max() -> str:
    """The ``cpu.max`` of this process's own cgroup v2 (``0::/PATH`` in
    ``/proc/self/cgroup``: a systemd slice, a pod's), or ``""``."""
    try:
        with open(_SELF_CGROUP) as fh:
            for line in fh:
                if line.startswith("0::/") and line.strip() != "0::/":
                    return os.path.join("/sys/fs/cgroup", line.strip()[4:], "cpu.max")
    except OSError:
        pass
    return ""


def _cgroup_v1_cpus(folder: str) -> int | None:
    """CPUs a cgroup v1 quota (``cpu.cfs_quota_us`` over ``cpu.cfs_period_us`` in
    ``folder``) allows, rounded up; ``None`` when there is none (``-1``) or no such files."""
    try:
        with open(os.path.join(folder, "cpu.cfs_quota_us")) as q:
            quota = int(q.read())
        with open(os.path.join(folder, "cpu.cfs_period_us")) as p:
            period = int(p.read())
    except (OSError, ValueError):
        return None
    if quota <= 0 or period <= 0:
        return None
    return max(1, -(-quota // period))


def _cgroup_cpus(path: str) -> int | None:
    """CPUs a cgroup v2 ``cpu.max`` (``"QUOTA PERIOD"`` or ``"max PERIOD"``) allows,
    rounded up; ``None`` when there is no such file (or ``path`` is ``""``) or no limit."""
    if not path:
        return None
    try:
        with open(path) as fh:
            quota, period = fh.read().split()[:2]
    except (OSError, ValueError):
        return None
    if quota == "max":
        return None
    try:
        return max(1, -(-int(quota) // int(period)))
    except (ValueError, ZeroDivisionError):
        return None


_io = SharedPool("headrace-io", "HEADRACE_IO_THREADS", DEFAULT_IO_THREADS)
_deep = SharedPool("headrace-deep", "HEADRACE_DEEP_IO_THREADS", DEFAULT_DEEP_IO_THREADS)
_cache = SharedPool("headrace-cache", "HEADRACE_CACHE_THREADS", DEFAULT_IO_THREADS)
_sources = SharedPool("headrace-sources", "HEADRACE_SOURCE_THREADS", DEFAULT_IO_THREADS)


def io_threads() -> int:
    """How many threads the shared pool has (or will have once started)."""
    return _io.threads


def set_io_threads(n: int) -> None:
    """Resize the shared pool; reads already submitted finish on the old one."""
    _io.resize(n)


def io_pool() -> Executor:
    """The shared pool, started on first use."""
    return _io.get()


def deep_io_threads() -> int:
    """How many threads the deep pool may start."""
    return _deep.threads


def set_deep_io_threads(n: int) -> None:
    """Resize the deep pool; reads already submitted finish on the old one."""
    _deep.resize(n)


def deep_io_pool() -> Executor:
    """The shared pool for deep queues (O_DIRECT, many reads in flight)."""
    return _deep.get()


def cache_pool() -> Executor:
    """The threads that read and write a local cache's entries (never waited on from it)."""
    return _cache.get()


def source_pool() -> Executor:
    """The threads on which a mixture's sources read side by side (each read then
    waits on the I/O pools, never on this one)."""
    return _sources.get()


def _after_fork_in_child() -> None:
    for pool in _ALL:
        pool.forget()


os.register_at_fork(after_in_child=_after_fork_in_child)
