"""A ring's worker process: it writes whole chunks of batches into its shared-memory slots.

Worker ``w`` of ``k`` runs an ordinary :class:`~headrace.pipeline.Loader`
over the steps ``t`` with ``(t - start) % k == w``, a chunk of steps at a
time, and copies each chunk, once, into the next free slot of a ring it
created once (``SharedMemory``, name ``headrace_<pid>_<hex>``), unlinked as
soon as the main process has mapped it, so nothing is left in ``/dev/shm``
whoever dies later. Only ``(first step, steps, slot)`` crosses the pipe (the
layout too when it changes, as it does every chunk of samples of several
shapes); a chunk of Python objects (strings), of a subclass of ``ndarray`` a slot
cannot rebuild (:func:`~headrace._ring_layout._layout`), or one that does not fit a
slot, is pickled through it instead. A persistent worker keeps its process, source
and ring from one run to the next: told a new start (:class:`_Inbox`), it drops
the chunk in hand, says ``_STARTED`` and reads from there. It ignores SIGINT (a Ctrl-C
reaches the main process, whose iterator stops it), and leaves by itself
when the main process closes or loses its lifeline (:func:`_watch_lifeline`).
"""

from __future__ import annotations

import collections
import errno
import os
import pickle
import secrets
import signal
import threading
import time
import traceback
from multiprocessing.connection import Connection
from multiprocessing.shared_memory import SharedMemory
from typing import Any

import numpy as np
from numpy.typing import NDArray

from headrace._messages import byte_size
from headrace._ring_layout import (
    _ALIGN,
    _CHUNK,
    _CHUNK_MSG,
    _END,
    _ERROR,
    _INLINE,
    _LAYOUT,
    _NOTES,
    _RUN,
    _SLOT_MSG,
    _STARTED,
    _STARTED_MSG,
    Doing,
    Layout,
    Region,
    RingConfig,
    _layout,
    _size,
)
from headrace.errors import HeadraceError
from headrace.formats._file_source import relay_corrupt, take_corrupt_news
from headrace.pipeline import Batch, Loader
from headrace.pipeline._stall import publish_running

__all__: list[str] = []

# How long a worker whose lifeline broke may take to leave by itself (less than _STOP_S,
# so close() rarely has to terminate one).
_ORPHAN_GRACE_S = 1.0


class _Named:
    """The worker's ring while its name is still in ``/dev/shm``.

    Unlinked by whichever thread comes first: the worker's own (once the main
    process has mapped the ring, or on its way out) or the lifeline's.
    """

    __slots__ = ("lock", "shm")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.shm: SharedMemory | None = None

    def create(self, name: str, size: int, cfg: RingConfig, steps: int, step: int) -> SharedMemory:
        """A ring of ``cfg.slots`` slots of ``size`` bytes, each a chunk of up to
        ``steps`` steps of ``step`` bytes (what its "does not fit" message names)."""
        slots = cfg.slots
        with self.lock:
            try:
                self.shm = SharedMemory(name=name, create=True, size=size * slots)
            except PermissionError as exc:  # a bare "[Errno 13] Permission denied: '/hr_..'"
                raise HeadraceError(no_shm(exc)) from exc
            _reserve(self.shm, size, cfg, steps, step)
            return self.shm

    def unlink(self) -> None:
        with self.lock:
            self.unlink_held()

    def unlink_held(self) -> None:
        if self.shm is not None:
            shm, self.shm = self.shm, None
            shm.unlink()


def no_shm(exc: OSError) -> str:
    """Why worker processes cannot start where ``/dev/shm`` is not writable (hardened
    containers, some HPC nodes), and the ways out."""
    return (
        f"worker processes hand batches over in shared memory, and this user cannot create "
        f"it ({exc.strerror or exc}: /dev/shm): make /dev/shm writable (docker run "
        "--shm-size=1g or --ipc=host; Kubernetes: an emptyDir of medium Memory mounted on "
        "/dev/shm), or read in the main process with num_workers=0"
    )


def _reserve(shm: SharedMemory, size: int, cfg: RingConfig, steps: int, step: int) -> None:
    """Take the ring's pages now. A tmpfs gives a page at its first write, and one past
    its size (a container's /dev/shm is 64 MB unless told otherwise) is a SIGBUS that
    kills the worker in the middle of a copy, saying nothing of why. Its message offers
    only the settings that would shrink the rings: not ``chunk_steps`` where a chunk is
    already one step (long-context samples), nor fewer workers where there is one."""
    fd = getattr(shm, "_fd", -1)
    slots, workers = cfg.slots, cfg.workers
    if fd < 0 or not hasattr(os, "posix_fallocate"):
        return  # not Linux: pages are taken as they are written
    try:
        os.posix_fallocate(fd, 0, size * slots)
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            return  # a file system that does not preallocate: as without
        st = os.statvfs("/dev/shm")
        fewer = ["fewer workers"] if workers > 1 else []
        smaller = [
            n for n, it in (("prefetch_factor", slots > 2), ("chunk_steps", steps > 1)) if it
        ]
        fewer += [f"a smaller {' or '.join(smaller)}"] if smaller else []
        rings = f"{workers} workers' rings need" if workers > 1 else "1 worker's ring needs"
        raise HeadraceError(
            f"a ring of {slots} slots of {byte_size(size)} (a chunk of {steps} "
            f"step{'s' if steps > 1 else ''} of {byte_size(step)}{' each' if steps > 1 else ''}) "
            "does not fit in "
            f"/dev/shm ({byte_size(st.f_bavail * st.f_frsize)} free; {rings} "
            f"{byte_size(workers * slots * size)}): give the container more shared memory "
            "(docker run --shm-size=1g; Kubernetes: an emptyDir of medium Memory mounted on "
            f"/dev/shm), or {'use ' + ', '.join(fewer) + ', or ' if fewer else ''}"
            "num_workers=0"
        ) from exc


def _watch_lifeline(alive: Connection, named: _Named) -> None:
    """From a daemon thread: leave once the main process has closed ``alive`` or died.

    Only the main process can write to ``alive``, and never does: when it closes the
    pipe, or dies in any way (SIGKILL included: the kernel closes its end), the read
    returns EOF, and a worker that has not left by itself within ``_ORPHAN_GRACE_S``
    (it notices at its next pipe operation, but may be in the middle of a long read)
    unlinks a ring still named and exits there and then. The pipe, not
    ``PR_SET_PDEATHSIG``: under ``forkserver`` a worker's parent is the fork server,
    and the signal is Linux-only.
    """

    def watch() -> None:
        try:
            alive.recv_bytes()  # nothing is ever sent: this returns by EOF only
        except (EOFError, OSError):
            pass
        time.sleep(_ORPHAN_GRACE_S)  # the worker's next send or receive ends it cleanly
        # Held to the end, so no ring is created (and left named) between here and exit.
        named.lock.acquire()
        try:
            named.unlink_held()
        finally:
            os._exit(0)

    threading.Thread(target=watch, name="headrace-lifeline", daemon=True).start()


class _Closed(Exception):
    """The main process closed this worker's pipes: it wants no more."""


_GONE = (EOFError, BrokenPipeError, ConnectionResetError)


def _put(out: Connection, data: bytes) -> None:
    """Send ``data`` to the main process; :class:`_Closed` once it has closed the pipe.

    Only the pipes' own errors mean that: an ``EOFError`` a read or a transform raises
    (``np.load`` of an empty file) is the step's error, told to the consumer.
    """
    try:
        out.send_bytes(data)
    except _GONE as exc:
        raise _Closed from exc


class _Inbox:
    """What the main process sends a worker, read in order: ``b"m"`` (the ring is
    mapped), slots back (into :attr:`free`), or a new run (persistent workers: kept in
    :attr:`run` until the worker gets to it, between chunks or while it waits)."""

    __slots__ = ("back", "free", "mapped", "run")

    def __init__(self, back: Connection) -> None:
        self.back = back
        self.free: collections.deque[int] = collections.deque()
        self.mapped = False
        self.run: tuple[int, int, tuple[int, int] | None] | None = None

    def take(self) -> None:
        """Wait for the next message (:class:`_Closed` once the main process has closed)."""
        try:
            msg = self.back.recv_bytes()
        except _GONE as exc:
            raise _Closed from exc
        if msg == b"m":
            self.mapped = True
        elif len(msg) == _SLOT_MSG.size:
            self.free.append(_SLOT_MSG.unpack(msg)[0])
        else:  # _RUN: a later one replaces one not yet begun
            self.run = pickle.loads(msg[len(_RUN) :])

    def poll(self) -> bool:
        """Take what has come, without waiting: whether a new run has come."""
        while True:
            try:
                waiting = self.back.poll()
            except _GONE as exc:
                raise _Closed from exc
            if not waiting:
                break
            self.take()
        return self.run is not None


class _Producer:
    """One worker's ring and runs: each run reads its steps from a start into the ring,
    which stays (with its size and the layout last sent) from run to run."""

    def __init__(self, cfg: RingConfig, w: int, out: Connection, inbox: _Inbox, named: _Named):
        self.cfg, self.w, self.out, self.inbox, self.named = cfg, w, out, inbox, named
        self.step = -1  # the next step this worker owes (named by its errors)
        self.shm: SharedMemory | None = None
        self.whole: NDArray[np.uint8] | None = None
        self.size = 0  # bytes per slot
        self.sent: Layout | None = None

    def run(self, start: int, origin: tuple[int, int] | None) -> None:
        """Send this worker's steps from ``start``, then ``_END``; stop as soon as a new
        run has come (the chunk in hand is dropped, its slot kept)."""
        k, w = self.cfg.workers, self.w
        offset = (start + w) % k
        self.step = start + (offset - start) % k
        loader = Loader(self.cfg.source, **self.cfg.loader, step_stride=k, step_offset=offset)
        loader.step, loader.origin = start, origin
        inbox = self.inbox
        with loader:
            for steps, arrays in loader.chunks():
                _send_news(self.out)
                if not self._send(loader, steps, arrays):
                    return
                self.step = steps[-1] + k
                if inbox.poll():  # before reading the next chunk: a new run need not wait
                    return
            _put(self.out, bytes([_END]))

    def _send(self, loader: Loader, steps: list[int], arrays: Batch) -> bool:
        laid = _layout(arrays, self.cfg.contiguous)
        out, inbox = self.out, self.inbox
        if self.whole is None and laid is not None:
            # Sized for the largest chunk the loader will read, from this first one.
            regions = laid[1][0]
            size = _size(regions) * -(-loader.max_chunk_steps // len(steps))
            if laid[1][2]:  # samples of several sizes: later chunks' may be larger
                size += size // 2
            # (At least a line: a batch of no fields takes no bytes, a segment some.)
            self.size = size = max(size + _ALIGN * len(regions), _ALIGN)
            name = f"headrace_{os.getpid()}_{secrets.token_hex(4)}"
            steps_max, step = loader.max_chunk_steps, _size(regions) // len(steps)
            self.shm = shm = self.named.create(name, size, self.cfg, steps_max, step)
            assert shm.buf is not None  # set by create=True
            self.whole = np.frombuffer(shm.buf, np.uint8)
            _put(out, bytes([_LAYOUT]) + pickle.dumps((name, size)))
            while not inbox.mapped:  # mapped by the main process: the name can go now
                inbox.take()
            self.named.unlink()
            inbox.free.extend(range(self.cfg.slots))
        if inbox.poll():
            return False
        if self.whole is None or laid is None or _size(laid[1][0]) > self.size:
            _put(out, bytes([_INLINE]) + pickle.dumps((steps, arrays), protocol=5))
            return True
        while not inbox.free:  # every slot is queued or leased: wait for one back
            inbox.take()
            if inbox.poll():
                return False
        slot = inbox.free.popleft()
        srcs, layout = laid
        size = self.size
        _fill(self.whole[slot * size : (slot + 1) * size], srcs, layout[0])
        head = _CHUNK_MSG.pack(_CHUNK, steps[0], len(steps), slot)
        _put(out, head if layout == self.sent else head + pickle.dumps(layout))
        self.sent = layout
        return True


def _worker(
    config: bytes, w: int, out: Connection, back: Connection, alive: Connection, doing: Doing
) -> None:
    """Produce this worker's steps into its ring until done, told to stop, or failed;
    a persistent worker then waits for its next run (:class:`_Inbox`), and begins it
    with ``_STARTED``, after everything it sent for the last. What transform or Mapped fn
    it runs, the oldest, goes to ``doing``, which the main process's stall warning names."""
    doing.tell(None)  # started: the stall warning no longer suspects the main module's import
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the main process handles Ctrl-C
    publish_running(lambda now: doing.tell(now[0] if now else None))
    named = _Named()
    _watch_lifeline(alive, named)
    producer: _Producer | None = None
    relay_corrupt()  # the files replaced here are listed by the main process's source
    try:
        cfg: RingConfig = pickle.loads(config)  # the source reopens its files here
        inbox = _Inbox(back)
        producer = _Producer(cfg, w, out, inbox, named)
        start, origin = cfg.start, cfg.origin
        while True:
            producer.run(start, origin)
            while inbox.run is None:  # idle until the next run, or EOF: closed
                inbox.take()
            run, start, origin = inbox.run
            inbox.run = None
            _put(out, _STARTED_MSG.pack(_STARTED, run))
    except _Closed:
        return  # the main process closed our pipes: it wants no more
    except BaseException as exc:
        try:
            _send_news(out)  # what was replaced before the error, listed there too
        except _Closed:
            return
        _send_error(out, -1 if producer is None else producer.step, exc)
    finally:
        named.unlink()
        if producer is not None:
            producer.whole = None  # the segment's last export here, so it can close
            if producer.shm is not None:
                producer.shm.close()


def _fill(slot: NDArray[np.uint8], srcs: list[NDArray[Any]], regions: tuple[Region, ...]) -> None:
    # A function of its own, so no loop variable outlives it holding an export of
    # the segment (which would make ``SharedMemory.close`` fail).
    for a, (at, dtype, shape) in zip(srcs, regions, strict=True):
        np.copyto(slot[at : at + a.nbytes].view(dtype).reshape(shape), a, casting="no")


def _send_news(out: Connection) -> None:
    """Send the corrupt files met since the last call to the main process, whose sources
    list them (:func:`~headrace.formats._file_source.merge_corrupt_news`)."""
    news = take_corrupt_news()
    if news:
        _put(out, bytes([_NOTES]) + pickle.dumps(news))


def _send_error(out: Connection, step: int, exc: BaseException) -> None:
    where = "worker traceback:\n" + "".join(traceback.format_exception(exc)).rstrip()
    exc.add_note(where)
    try:
        payload = pickle.dumps((step, exc))
        # An exception whose __init__ takes other arguments than its message pickles,
        # but fails to unpickle (a TypeError about __init__ would reach the consumer).
        pickle.loads(payload)
    except Exception:  # an exception that does not pickle: its type, message, traceback
        text = HeadraceError(f"{type(exc).__name__}: {exc}")
        text.add_note(where)  # once (formatting exc again would repeat its notes)
        payload = pickle.dumps((step, text))
    try:
        out.send_bytes(bytes([_ERROR]) + payload)
    except OSError:
        pass  # the main process is gone
