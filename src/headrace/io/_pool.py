"""The process-wide pool of I/O threads.

Positional reads (``os.preadv``) release the GIL, so a handful of threads keep
many requests in flight without processes. One pool serves every reader in the
process, so opening more readers never multiplies threads. After ``fork`` the
child gets a fresh pool: the parent's threads do not exist there.

A second, deeper pool serves O_DIRECT and other high-queue-depth reads: NVMe
and network storage want 32 to 128 requests in flight, more than the 8 threads
that suit buffered reads. Its threads start only when a deep read needs them
(``ThreadPoolExecutor`` spawns lazily), so an idle deep pool costs nothing.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

__all__ = [
    "DEFAULT_DEEP_IO_THREADS",
    "DEFAULT_IO_THREADS",
    "deep_io_pool",
    "deep_io_threads",
    "io_pool",
    "io_threads",
    "set_deep_io_threads",
    "set_io_threads",
]

DEFAULT_IO_THREADS = 8
DEFAULT_DEEP_IO_THREADS = 64

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_threads = int(os.environ.get("HEADRACE_IO_THREADS", DEFAULT_IO_THREADS))
_deep_pool: ThreadPoolExecutor | None = None
_deep_threads = int(os.environ.get("HEADRACE_DEEP_IO_THREADS", DEFAULT_DEEP_IO_THREADS))


def io_threads() -> int:
    """How many threads the shared pool has (or will have once started)."""
    return _threads


def set_io_threads(n: int) -> None:
    """Resize the shared pool; reads already submitted finish on the old one."""
    global _pool, _threads
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"I/O threads must be a positive integer (got {n!r}).")
    with _lock:
        old, _pool, _threads = _pool, None, n
    if old is not None:
        old.shutdown(wait=False)


def io_pool() -> ThreadPoolExecutor:
    """The shared pool, started on first use."""
    global _pool
    pool = _pool
    if pool is None:
        with _lock:
            if _pool is None:
                _pool = ThreadPoolExecutor(_threads, thread_name_prefix="headrace-io")
            pool = _pool
    return pool


def deep_io_threads() -> int:
    """How many threads the deep pool may start."""
    return _deep_threads


def set_deep_io_threads(n: int) -> None:
    """Resize the deep pool; reads already submitted finish on the old one."""
    global _deep_pool, _deep_threads
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"Deep I/O threads must be a positive integer (got {n!r}).")
    with _lock:
        old, _deep_pool, _deep_threads = _deep_pool, None, n
    if old is not None:
        old.shutdown(wait=False)


def deep_io_pool() -> ThreadPoolExecutor:
    """The shared pool for deep queues (O_DIRECT, many reads in flight)."""
    global _deep_pool
    pool = _deep_pool
    if pool is None:
        with _lock:
            if _deep_pool is None:
                _deep_pool = ThreadPoolExecutor(_deep_threads, thread_name_prefix="headrace-deep")
            pool = _deep_pool
    return pool


def _after_fork_in_child() -> None:
    # The parent's worker threads were not copied; its executors would hang.
    global _pool, _deep_pool
    _pool = None
    _deep_pool = None


os.register_at_fork(after_in_child=_after_fork_in_child)
