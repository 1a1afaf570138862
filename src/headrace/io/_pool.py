"""The process-wide pool of I/O threads.

Positional reads (``os.preadv``) release the GIL, so a handful of threads keep
many requests in flight without processes. One pool serves every reader in the
process, so opening more readers never multiplies threads. After ``fork`` the
child gets a fresh pool: the parent's threads do not exist there.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

__all__ = ["DEFAULT_IO_THREADS", "io_pool", "io_threads", "set_io_threads"]

DEFAULT_IO_THREADS = 8

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_threads = int(os.environ.get("HEADRACE_IO_THREADS", DEFAULT_IO_THREADS))


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


def _after_fork_in_child() -> None:
    # The parent's worker threads were not copied; its executor would hang.
    global _pool
    _pool = None


os.register_at_fork(after_in_child=_after_fork_in_child)
