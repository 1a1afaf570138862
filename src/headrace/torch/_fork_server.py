"""What the fork server imports before it forks a worker: torch and headrace's readers,
once for all workers, instead of in each worker (2.8 s CPU a worker, 2c, 2026-12-04).

A stock ``DataLoader(dataset, num_workers=k, multiprocessing_context="forkserver")``
starts the server with Python's default, ``__main__`` alone, which Python 3.11 does not
even import: each of its workers then imported torch itself, every epoch (non-persistent
workers). The dataset is pickled in the main process before the server is started
(``popen_forkserver.Popen._launch`` pickles the process object, then connects, which
starts the server): :func:`preload_if_forking` there asks for the preloads in time.
"""

from __future__ import annotations

from multiprocessing import context, forkserver, popen_forkserver

__all__ = ["PRELOAD", "preload", "preload_if_forking"]

#: The fork server's preloads, as HeadraceDataLoader starts it.
PRELOAD = ["__main__", "torch", "headrace._shm_ring", "headrace.formats"]


def preload() -> None:
    """Ask the fork server to preload :data:`PRELOAD` as well as the modules already
    asked for (the user's ``set_forkserver_preload``, kept: a stock DataLoader's worker
    start replaced them); it takes effect when the server starts: a running one is used
    as it is."""
    asked = list(getattr(forkserver._forkserver, "_preload_modules", ["__main__"]))
    forkserver.set_forkserver_preload(asked + [m for m in PRELOAD if m not in asked])


def preload_if_forking() -> None:
    """Where this pickling is a fork server's process start, the server preloads
    :data:`PRELOAD` too (:func:`preload`)."""
    if isinstance(context.get_spawning_popen(), popen_forkserver.Popen):
        preload()
