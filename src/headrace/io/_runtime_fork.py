"""Object storage in a process forked after obstore started: refused, not left to hang.

obstore drives every request on a Tokio runtime that starts with the first request
and keeps worker threads; ``fork`` copies only the thread that calls it, so in a
child of a process that had made a request the runtime has no threads, and every
request waits for ever (a stock ``DataLoader``'s workers start by ``fork`` on Linux:
a worker over an ``s3://`` source never delivered a batch). A process that had made
none, or one started by ``spawn`` or ``forkserver``, starts its own runtime.
"""

from __future__ import annotations

import os

from headrace.errors import ConfigError

__all__ = ["check_runtime"]

# The process whose request started obstore's runtime; a forked child inherits it.
_started_in: int | None = None


def check_runtime(url: str) -> None:
    """Before a request to ``url``: note that this process starts the runtime, or refuse
    if a process this one was forked from did."""
    global _started_in
    pid = os.getpid()
    if _started_in is None:
        _started_in = pid
    elif _started_in != pid:
        raise ConfigError(
            f"{url}: object storage cannot be read in this process (pid {pid}): it was "
            f"forked from one (pid {_started_in}) that had read object storage already, "
            "and obstore's runtime does not survive a fork (every request would wait for "
            "ever). Start worker processes with 'forkserver' or 'spawn' (DataLoader(..., "
            "multiprocessing_context='forkserver'), or HeadraceDataLoader, which does), "
            "or fork before the first read."
        )
