"""A stock ``DataLoader``'s spawn and forkserver workers leave when the process whose
:class:`~headrace.torch.TorchDataset` they copy dies.

torch's workers watch their parent's pid, and a forkserver worker's parent is the fork
server, which lives as long as any of its children: each holds the server's own
lifeline, handed to it so that it could start processes there too. After a SIGKILL of
the job (an OOM kill, a preemption's), its workers, the fork server and the resource
tracker stayed for good, holding the dataset's memory and files, and the worker queues'
semaphores in ``/dev/shm``. Here, as in ``headrace._ring_worker``: each process keeps
the write end of a pipe that it never writes nor closes; a worker being started gets
the read end with its copy of the dataset, and a daemon thread there waits on it. When
the process dies in any way the read returns EOF, and the worker exits 1 s later (it is
no longer waited for; torch's own shut-down of a job that ends normally comes first).
"""

from __future__ import annotations

import os
import threading
import time
from multiprocessing.context import get_spawning_popen
from typing import Any

from headrace.torch._mailbox import hand_over

__all__ = ["Lifeline"]

_GRACE_S = 1.0

#: This process's pipe, ``(read, write)``, and the process it was made in (a forked
#: child makes its own: the one it inherited is its parent's).
_pipe: tuple[int, int] | None = None
_pipe_pid = 0
_watching = False  # this worker's thread runs (several datasets of one ChainDataset)


class Lifeline:
    """Held by a dataset; pickled for a worker being started (spawn, forkserver), it hands
    the worker the read end and sets it watching (:func:`_watch`)."""

    __slots__ = ()

    def __reduce__(self) -> tuple[Any, ...]:
        if get_spawning_popen() is None:  # a copy, or a forked worker (torch watches it)
            return (Lifeline, ())
        global _pipe, _pipe_pid
        if _pipe is None or _pipe_pid != os.getpid():
            _pipe, _pipe_pid = os.pipe(), os.getpid()  # (not inherited by exec'd processes)
        try:
            fd = hand_over(_pipe[0])
        except Exception:  # a start that takes no descriptors (not one of Python's)
            return (Lifeline, ())
        return (_watch, (fd,))


def _watch(fd: Any) -> Lifeline:
    """In a worker, as its dataset is unpickled: leave once the pipe's far end is gone."""
    global _watching
    read = fd.detach()
    if not _watching:
        _watching = True
        threading.Thread(target=_wait, args=(read,), name="headrace-lifeline", daemon=True).start()
    return Lifeline()


def _wait(read: int) -> None:
    try:
        while os.read(read, 1):  # nothing is ever written: this returns by EOF only
            pass
    except OSError:
        pass
    time.sleep(_GRACE_S)
    os._exit(0)
